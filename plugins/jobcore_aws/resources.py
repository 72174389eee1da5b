"""Converging one AWS resource to its config: each `upsert` returns the changes it made.

Running `upsert` twice makes no change the second time; `delete` of an
absent resource succeeds with no change. Two jobs may work on one resource at
once: a create that finds the resource made since we looked goes on to converge
it, and a delete that finds it gone has nothing left to do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from botocore.exceptions import ClientError

from jobcore import PermanentError
from jobcore_aws.errors import AwsTransientError, absent_on, error_code, exists_on
from jobcore_aws.models import (
    DynamoDbTableConfig,
    S3BucketConfig,
    SnsTopicConfig,
    SqsQueueConfig,
    SsmParameterConfig,
)

Client = Any  # a boto3 client
ClientFor = Callable[[str], Client]


class Resource(Protocol):
    service: str

    def upsert(self, client: Client, name: str, config: Any) -> list[str]: ...
    def delete(self, client: Client, name: str) -> list[str]: ...
    def exists(self, client: Client, name: str) -> bool: ...


def _tag_diff(current: dict[str, str], wanted: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """(tags to set, keys to remove) to turn `current` into `wanted`."""
    to_set = {k: v for k, v in wanted.items() if current.get(k) != v}
    return to_set, sorted(k for k in current if k not in wanted)


class S3Bucket:
    service = "s3"

    def exists(self, client: Client, name: str) -> bool:
        return (
            absent_on({"404", "NoSuchBucket", "NotFound"}, lambda: client.head_bucket(Bucket=name))
            is not None
        )

    def upsert(self, client: Client, name: str, config: S3BucketConfig) -> list[str]:
        changes = []
        if not self.exists(client, name):
            region = client.meta.region_name
            extra = (
                {}
                if region in (None, "us-east-1")
                else {"CreateBucketConfiguration": {"LocationConstraint": region}}
            )
            # BucketAlreadyOwnedByYou: another job made it since we looked; converge it
            if exists_on(
                {"BucketAlreadyOwnedByYou"}, lambda: client.create_bucket(Bucket=name, **extra)
            ):
                changes.append("created bucket")
        tagging = absent_on(
            {"NoSuchTagSet", "NoSuchTagSetError"}, lambda: client.get_bucket_tagging(Bucket=name)
        )
        current = {t["Key"]: t["Value"] for t in (tagging or {}).get("TagSet", [])}
        if config.tags is not None and current != config.tags:
            if config.tags:
                tag_set = [{"Key": k, "Value": v} for k, v in sorted(config.tags.items())]
                client.put_bucket_tagging(Bucket=name, Tagging={"TagSet": tag_set})
            else:
                client.delete_bucket_tagging(Bucket=name)
            changes.append("set tags")
        if config.versioning is not None:
            status = client.get_bucket_versioning(Bucket=name).get("Status")
            wanted = "Enabled" if config.versioning else "Suspended"
            if status != wanted and (config.versioning or status == "Enabled"):
                client.put_bucket_versioning(
                    Bucket=name, VersioningConfiguration={"Status": wanted}
                )
                changes.append(f"versioning {wanted.lower()}")
        return changes

    def delete(self, client: Client, name: str) -> list[str]:
        if not self.exists(client, name):
            return []
        gone = absent_on(  # BucketNotEmpty is a permanent failure
            {"NoSuchBucket", "404"}, lambda: client.delete_bucket(Bucket=name)
        )
        return [] if gone is None else ["deleted bucket"]


SQS_MISSING = frozenset({"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"})
# the queue exists with other attributes (CreateQueue with the same ones returns its URL)
SQS_EXISTS = frozenset(
    {"QueueAlreadyExists", "QueueNameExists", "AWS.SimpleQueueService.QueueNameExists"}
)


class SqsQueue:
    service = "sqs"

    def _url(self, client: Client, name: str) -> str | None:
        found = absent_on(SQS_MISSING, lambda: client.get_queue_url(QueueName=name))
        return None if found is None else str(found["QueueUrl"])

    def exists(self, client: Client, name: str) -> bool:
        return self._url(client, name) is not None

    def upsert(self, client: Client, name: str, config: SqsQueueConfig) -> list[str]:
        url = self._url(client, name)
        changes = []
        if url is None:
            created = exists_on(
                SQS_EXISTS,
                lambda: client.create_queue(
                    QueueName=name, Attributes=config.attributes or {}, tags=config.tags or {}
                ),
            )
            if created is not None:
                # CreateQueue also answers with the URL of a queue another job has just made
                # with the same attributes; its tags are checked below
                return [
                    "created queue",
                    *self._converge_tags(client, str(created["QueueUrl"]), config),
                ]
            url = self._url(client, name)
            if url is None:  # made and deleted again since
                raise AwsTransientError(f"queue {name} was created and deleted meanwhile")
        if config.attributes:
            current = client.get_queue_attributes(QueueUrl=url, AttributeNames=["All"]).get(
                "Attributes", {}
            )
            differing = {k: v for k, v in config.attributes.items() if current.get(k) != v}
            if differing:
                client.set_queue_attributes(QueueUrl=url, Attributes=differing)
                changes.append(f"set attributes {sorted(differing)}")
        return changes + self._converge_tags(client, url, config)

    def _converge_tags(self, client: Client, url: str, config: SqsQueueConfig) -> list[str]:
        if config.tags is None:
            return []
        to_set, to_remove = _tag_diff(
            client.list_queue_tags(QueueUrl=url).get("Tags", {}), config.tags
        )
        if to_set:
            client.tag_queue(QueueUrl=url, Tags=to_set)
        if to_remove:
            client.untag_queue(QueueUrl=url, TagKeys=to_remove)
        return ["set tags"] if to_set or to_remove else []

    def delete(self, client: Client, name: str) -> list[str]:
        url = self._url(client, name)
        if url is None:
            return []
        gone = absent_on(SQS_MISSING, lambda: client.delete_queue(QueueUrl=url))
        return [] if gone is None else ["deleted queue"]


class SnsTopic:
    service = "sns"

    def _arn(self, client: Client, name: str) -> str | None:
        for page in client.get_paginator("list_topics").paginate():
            for topic in page.get("Topics", []):
                if topic["TopicArn"].rsplit(":", 1)[-1] == name:
                    return str(topic["TopicArn"])
        return None

    def exists(self, client: Client, name: str) -> bool:
        return self._arn(client, name) is not None

    def upsert(self, client: Client, name: str, config: SnsTopicConfig) -> list[str]:
        arn = self._arn(client, name)
        if arn is None:
            tags = [{"Key": k, "Value": v} for k, v in sorted((config.tags or {}).items())]
            try:
                created = client.create_topic(
                    Name=name, Attributes=config.attributes or {}, Tags=tags
                )
            except ClientError as exc:
                # AWS: "Topic already exists with different tags/attributes": another job
                # made it since we looked
                if error_code(exc) != "InvalidParameter" or "already exists" not in str(exc):
                    raise
                arn = self._arn(client, name)
                if arn is None:  # made and deleted again since
                    raise AwsTransientError(
                        f"topic {name} was created and deleted meanwhile"
                    ) from None
                return self._converge(client, arn, config)
            # CreateTopic also answers with the ARN of a topic another job has just made (and
            # then leaves its attributes and tags as they are): converge those
            return ["created topic", *self._converge(client, str(created["TopicArn"]), config)]
        return self._converge(client, arn, config)

    def _converge(self, client: Client, arn: str, config: SnsTopicConfig) -> list[str]:
        changes = []
        if config.attributes:
            current = client.get_topic_attributes(TopicArn=arn).get("Attributes", {})
            for key, value in sorted(config.attributes.items()):
                if current.get(key) != value:
                    client.set_topic_attributes(
                        TopicArn=arn, AttributeName=key, AttributeValue=value
                    )
                    changes.append(f"set attribute {key}")
        if config.tags is None:
            return changes
        listed = client.list_tags_for_resource(ResourceArn=arn).get("Tags", [])
        to_set, to_remove = _tag_diff({t["Key"]: t["Value"] for t in listed}, config.tags)
        if to_set:
            client.tag_resource(
                ResourceArn=arn, Tags=[{"Key": k, "Value": v} for k, v in to_set.items()]
            )
        if to_remove:
            client.untag_resource(ResourceArn=arn, TagKeys=to_remove)
        if to_set or to_remove:
            changes.append("set tags")
        return changes

    def delete(self, client: Client, name: str) -> list[str]:
        arn = self._arn(client, name)
        if arn is None:
            return []
        client.delete_topic(TopicArn=arn)
        return ["deleted topic"]


class SsmParameter:
    service = "ssm"

    def _get(self, client: Client, name: str) -> dict[str, Any] | None:
        found = absent_on(
            {"ParameterNotFound"}, lambda: client.get_parameter(Name=name, WithDecryption=True)
        )
        return None if found is None else dict(found["Parameter"])

    def exists(self, client: Client, name: str) -> bool:
        return self._get(client, name) is not None

    def upsert(self, client: Client, name: str, config: SsmParameterConfig) -> list[str]:
        current = self._get(client, name)
        if current is None:
            # no Overwrite: a parameter another job made since we looked is updated below,
            # never overwritten with this create's default type
            created = exists_on(
                {"ParameterAlreadyExists"},
                lambda: client.put_parameter(
                    Name=name, Value=config.value, Type=config.type or "String", Overwrite=False
                ),
            )
            if created is not None:
                return ["created parameter"]
            current = self._get(client, name)
            if current is None:  # made and deleted again since
                raise AwsTransientError(f"parameter {name} was created and deleted meanwhile")
        if current.get("Value") == config.value and config.type in (None, current.get("Type")):
            return []
        # without `type`, Type is left out and the parameter keeps its own
        extra = {"Type": config.type} if config.type else {}
        client.put_parameter(Name=name, Value=config.value, Overwrite=True, **extra)
        return ["updated parameter"]

    def delete(self, client: Client, name: str) -> list[str]:
        gone = absent_on({"ParameterNotFound"}, lambda: client.delete_parameter(Name=name))
        return [] if gone is None else ["deleted parameter"]


class DynamoDbTable:
    service = "dynamodb"

    def _describe(self, client: Client, name: str) -> dict[str, Any] | None:
        found = absent_on(
            {"ResourceNotFoundException"}, lambda: client.describe_table(TableName=name)
        )
        return None if found is None else dict(found["Table"])

    def exists(self, client: Client, name: str) -> bool:
        return self._describe(client, name) is not None

    def upsert(self, client: Client, name: str, config: DynamoDbTableConfig) -> list[str]:
        table = self._describe(client, name)
        wanted_keys = [k.model_dump() for k in config.key_schema]
        throughput = (
            config.provisioned_throughput.model_dump() if config.provisioned_throughput else None
        )
        if table is None:
            extra = {"ProvisionedThroughput": throughput} if throughput else {}
            # ResourceInUseException: a table of that name exists (another job made it since
            # we looked) or is being deleted; converge the one there, or retry
            created = exists_on(
                {"ResourceInUseException"},
                lambda: client.create_table(
                    TableName=name,
                    KeySchema=wanted_keys,
                    AttributeDefinitions=[a.model_dump() for a in config.attribute_definitions],
                    BillingMode=config.billing_mode or "PAY_PER_REQUEST",
                    **extra,
                ),
            )
            if created is not None:
                return ["created table"]
            table = self._describe(client, name)
            if table is None or table.get("TableStatus") == "DELETING":
                raise AwsTransientError(f"table {name} is being deleted; create it again later")
        if sorted(map(str, table.get("KeySchema", []))) != sorted(map(str, wanted_keys)):
            raise PermanentError(
                f"table {name} has key schema {table.get('KeySchema')}; a key schema cannot be "
                "changed in place: delete the table and create it again"
            )
        current_mode = table.get("BillingModeSummary", {}).get("BillingMode", "PROVISIONED")
        current_throughput = {
            k: table.get("ProvisionedThroughput", {}).get(k)
            for k in ("ReadCapacityUnits", "WriteCapacityUnits")
        }
        if config.billing_mode is None:  # left out: the table keeps its billing mode
            return []
        if current_mode != config.billing_mode or (throughput and current_throughput != throughput):
            extra = {"ProvisionedThroughput": throughput} if throughput else {}
            client.update_table(TableName=name, BillingMode=config.billing_mode, **extra)
            return [f"billing mode {config.billing_mode}"]
        return []

    def delete(self, client: Client, name: str) -> list[str]:
        gone = absent_on({"ResourceNotFoundException"}, lambda: client.delete_table(TableName=name))
        return [] if gone is None else ["deleted table"]


RESOURCES: dict[str, Resource] = {
    "s3_bucket": S3Bucket(),
    "sqs_queue": SqsQueue(),
    "sns_topic": SnsTopic(),
    "ssm_parameter": SsmParameter(),
    "dynamodb_table": DynamoDbTable(),
}
