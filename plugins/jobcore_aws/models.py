"""Payload and per-resource config models of `sync_aws`."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

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
# Where AWS needs a value to create the resource (`type`, `billing_mode`), the default
# applies on create only; an update without the field keeps what the resource has.

# S3, SQS and SNS share these tag rules; checked at enqueue so that a tag AWS refuses
# never fails a job half-way (after the bucket was created or the attributes were set).
MAX_TAGS = 50
MAX_TAG_KEY = 128
MAX_TAG_VALUE = 256


def _tag_problem(tags: dict[str, str]) -> str | None:
    if len(tags) > MAX_TAGS:
        return f"{len(tags)} tags given; AWS allows at most {MAX_TAGS}: remove some"
    for key, value in tags.items():
        shown = key if len(key) <= 40 else key[:40] + "…"
        if not key:
            return "a tag key is empty; give every tag a key of 1-128 characters"
        if key[:4].lower() == "aws:":
            return (
                f"tag key {shown!r} starts with 'aws:', a prefix AWS reserves for its own "
                "tags: choose a key without it"
            )
        if len(key) > MAX_TAG_KEY:
            return f"tag key {shown!r} has {len(key)} characters; shorten it to {MAX_TAG_KEY}"
        if len(value) > MAX_TAG_VALUE:
            return (
                f"the value of tag {shown!r} has {len(value)} characters; "
                f"shorten it to {MAX_TAG_VALUE}"
            )
    return None


def _valid_tags(tags: dict[str, str]) -> dict[str, str]:
    problem = _tag_problem(tags)
    if problem:
        raise PydanticCustomError("aws_tags", problem)
    return tags


Tags = Annotated[dict[str, str], AfterValidator(_valid_tags)]


class S3BucketConfig(Payload):
    tags: Tags | None = None  # None: leave the tags as they are
    versioning: bool | None = None  # None: leave versioning as it is


class SqsQueueConfig(Payload):
    attributes: dict[str, str] | None = None  # the attributes named are set, others kept
    tags: Tags | None = None


class SnsTopicConfig(Payload):
    attributes: dict[str, str] | None = None
    tags: Tags | None = None


class SsmParameterConfig(Payload):
    value: str
    # None: String on create; an update keeps the parameter's type (a SecureString stays one)
    type: Literal["String", "StringList", "SecureString"] | None = None


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
    # None: PAY_PER_REQUEST on create; an update keeps the table's billing mode
    billing_mode: Literal["PAY_PER_REQUEST", "PROVISIONED"] | None = None
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
            raise PydanticCustomError(  # no "Value error, " before the field names
                "aws_config",
                "config for {kind}: {problems}",
                {"kind": self.resource_type, "problems": problems},
            ) from None
        # only what the producer gave: a default stored here would later read as an order
        self.config = parsed.model_dump(mode="json", exclude_unset=True)
        return self

    def parsed_config(self) -> Any:
        return CONFIG_MODELS[self.resource_type].model_validate(self.config)
