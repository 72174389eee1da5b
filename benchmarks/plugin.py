"""The `stamp` job type: measures enqueue -> handler-start latency."""

from __future__ import annotations

import time
from collections.abc import Callable

from jobcore import JobContext, JobType, Payload, hookimpl


class StampPayload(Payload):
    t0: float  # time.time() just before enqueue was called


def stamp(payload: StampPayload, ctx: JobContext) -> dict[str, float]:
    return {"latency_ms": (time.time() - payload.t0) * 1000}


@hookimpl
def jobcore_register_job_types(register: Callable[[JobType], None]) -> None:
    register(JobType(name="stamp", payload_model=StampPayload, handler=stamp))
