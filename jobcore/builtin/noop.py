"""`noop`: a job type that needs no plugin, for trying and benchmarking the core."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import Field

from jobcore.context import JobContext
from jobcore.errors import Interrupted
from jobcore.hookspecs import hookimpl
from jobcore.registry import JobType, Payload


class NoopPayload(Payload):
    sleep: float = Field(default=0.0, ge=0, description="seconds to sleep, checking should_stop")
    fail: bool = Field(default=False, description="raise an error instead of succeeding")


def run_noop(payload: NoopPayload, ctx: JobContext) -> dict[str, Any] | None:
    if payload.sleep and ctx.wait(payload.sleep):
        raise Interrupted(f"noop stopped early: {ctx.stop_reason}")
    if payload.fail:
        raise RuntimeError("noop failed as asked (fail: true)")
    return {"slept": payload.sleep} if payload.sleep else None


@hookimpl(trylast=True)
def jobcore_register_job_types(register: Callable[[JobType], None]) -> None:
    register(
        JobType(
            name="noop",
            payload_model=NoopPayload,
            handler=run_noop,
            description="does nothing; {sleep: seconds, fail: bool}",
        )
    )
