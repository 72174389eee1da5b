"""Built-in execution: call the job type's handler with the validated payload."""

from __future__ import annotations

from typing import Any

from jobcore.context import JobContext
from jobcore.hookspecs import hookimpl
from jobcore.models import Job


@hookimpl(trylast=True)
def jobcore_execute_job(job: Job, ctx: JobContext) -> Any:
    return ctx.job_type.handler(ctx.payload, ctx)
