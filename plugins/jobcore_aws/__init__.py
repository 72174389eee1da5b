"""jobcore plugin `aws`: `sync_aws` converges an AWS resource to a config, through boto3."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jobcore import Config, Job, JobContext, JobType, hookimpl
from jobcore.plugins import require
from jobcore_aws.models import AwsSettings, SyncAws

require("boto3", extra="aws")

__all__ = ["AwsSettings", "SyncAws"]


def sync_aws(payload: SyncAws, ctx: JobContext) -> dict[str, Any]:
    from jobcore_aws.clients import RESOURCES, classified, client  # boto3, on first use

    settings = ctx.config.plugin_settings("aws", AwsSettings)
    resource = RESOURCES[payload.resource_type]
    what = f"{payload.action} {payload.resource_type} {payload.resource_id!r}"
    with classified(what):
        aws = client(resource.service, settings)
        if payload.action == "delete":
            changes = resource.delete(aws, payload.resource_id)
        else:
            changes = resource.upsert(aws, payload.resource_id, payload.parsed_config())
    return {
        "resource_type": payload.resource_type,
        "resource_id": payload.resource_id,
        "action": payload.action,
        "changes": changes,
    }


@hookimpl
def jobcore_configure(config: Config) -> None:
    """Validate `[plugins.aws]` / `JOBCORE_AWS_*` at start (a bad one is one `Error:`)."""
    config.plugin_settings("aws", AwsSettings)


@hookimpl
def jobcore_register_job_types(register: Callable[[JobType], None]) -> None:
    register(
        JobType(
            name="sync_aws",
            payload_model=SyncAws,
            handler=sync_aws,
            max_attempts=5,
            timeout=300,
            description="create/update (upsert) or delete an S3 bucket, SQS queue, SNS topic, SSM parameter or DynamoDB table",
        )
    )


@hookimpl
def jobcore_reconcile(job: Job, config: Config) -> list[str] | None:
    if job.type != "sync_aws":
        return None
    from jobcore_aws.clients import RESOURCES, classified, client

    payload = SyncAws.model_validate(job.payload)
    resource = RESOURCES[payload.resource_type]
    settings = config.plugin_settings("aws", AwsSettings)
    with classified(f"check {payload.resource_type} {payload.resource_id!r}"):
        exists = resource.exists(client(resource.service, settings), payload.resource_id)
    if payload.action == "upsert" and not exists:
        return [f"{payload.resource_type} {payload.resource_id} is missing"]
    if payload.action == "delete" and exists:
        return [f"{payload.resource_type} {payload.resource_id} exists again"]
    return []
