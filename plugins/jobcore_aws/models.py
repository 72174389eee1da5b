"""Payload and per-resource config models of `sync_aws`."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from jobcore import Payload

# what botocore accepts as a bucket name before sending anything (AWS's own rules are
# stricter for new buckets; those are the service's answer, a permanent failure)
BUCKET_NAME = re.compile(r"[a-zA-Z0-9.\-_]{1,255}")

ResourceType = Literal["s3_bucket", "sqs_queue", "sns_topic", "ssm_parameter", "dynamodb_table"]


class AwsSettings(BaseModel):
    """`[plugins.aws]` / `JOBCORE_AWS_*`; unset values fall back to boto3's own
    `AWS_ENDPOINT_URL` and `AWS_DEFAULT_REGION`."""

    model_config = ConfigDict(extra="forbid")

    endpoint_url: str | None = None
    region: str | None = None


# A field left out (or null) leaves that part of the resource as it is: `tags: {}` removes
# every tag, a missing `tags` keeps them; `attributes` sets the attributes it names only.


class S3BucketConfig(Payload):
    tags: dict[str, str] | None = None  # None: leave the tags as they are
    versioning: bool | None = None  # None: leave versioning as it is


class SqsQueueConfig(Payload):
    attributes: dict[str, str] | None = None  # the attributes named are set, others kept
    tags: dict[str, str] | None = None


class SnsTopicConfig(Payload):
    attributes: dict[str, str] | None = None
    tags: dict[str, str] | None = None


class SsmParameterConfig(Payload):
    value: str
    type: Literal["String", "StringList", "SecureString"] = "String"


class KeyElement(Payload):
    AttributeName: str
    KeyType: Literal["HASH", "RANGE"]


class AttributeDefinition(Payload):
    AttributeName: str
    AttributeType: Literal["S", "N", "B"]


class Throughput(Payload):
    ReadCapacityUnits: int = Field(gt=0)
    WriteCapacityUnits: int = Field(gt=0)


class DynamoDbTableConfig(Payload):
    key_schema: list[KeyElement] = Field(min_length=1, max_length=2)
    attribute_definitions: list[AttributeDefinition] = Field(min_length=1)
    billing_mode: Literal["PAY_PER_REQUEST", "PROVISIONED"] = "PAY_PER_REQUEST"
    provisioned_throughput: Throughput | None = None

    @model_validator(mode="after")
    def _consistent(self) -> DynamoDbTableConfig:
        defined = {a.AttributeName for a in self.attribute_definitions}
        missing = [k.AttributeName for k in self.key_schema if k.AttributeName not in defined]
        if missing:
            raise ValueError(f"key attributes {missing} have no attribute_definitions entry")
        if (self.billing_mode == "PROVISIONED") != (self.provisioned_throughput is not None):
            raise ValueError("provisioned_throughput is required with PROVISIONED and only then")
        return self


CONFIG_MODELS: dict[str, type[Payload]] = {
    "s3_bucket": S3BucketConfig,
    "sqs_queue": SqsQueueConfig,
    "sns_topic": SnsTopicConfig,
    "ssm_parameter": SsmParameterConfig,
    "dynamodb_table": DynamoDbTableConfig,
}


class SyncAws(Payload):
    resource_type: ResourceType
    resource_id: str = Field(min_length=1)
    action: Literal["upsert", "delete"] = "upsert"
    config: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _config_fits_type(self) -> SyncAws:
        if self.resource_type == "s3_bucket" and not BUCKET_NAME.fullmatch(self.resource_id):
            raise ValueError(
                f"resource_id: {self.resource_id!r} is not a valid S3 bucket name "
                "(letters, digits, '.', '-', '_'; at most 255)"
            )
        if self.action == "delete" and not self.config:
            return self
        try:
            parsed = CONFIG_MODELS[self.resource_type].model_validate(self.config)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(config)'}: "
                f"{'unknown field' if e['type'] == 'extra_forbidden' else e['msg']}"
                for e in exc.errors()
            )
            raise ValueError(f"config for {self.resource_type}: {problems}") from None
        # only what the producer gave: a default stored here would later read as an order
        self.config = parsed.model_dump(mode="json", exclude_unset=True)
        return self

    def parsed_config(self) -> Any:
        return CONFIG_MODELS[self.resource_type].model_validate(self.config)
