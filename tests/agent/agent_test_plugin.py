"""Job types for agent tests, loaded in hub and agent subprocesses (JOBCORE_PLUGINS)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from beating import BeatsPayload, beats
from pydantic import Field

from jobcore import JobContext, JobType, Payload, hookimpl


class StampPayload(Payload):
    log: str
    sleep: float = Field(default=0.0, ge=0)
    started: str | None = None  # a file created when the handler starts


def stamp(payload: StampPayload, ctx: JobContext) -> dict[str, object]:
    """Append `id attempt worker start_ms end_ms` to a log (O_APPEND) around an optional sleep."""
    start = time.time_ns() // 1_000_000
    if payload.started:
        with open(payload.started, "w") as handle:
            handle.write(f"{ctx.job.id} {ctx.attempt} {ctx.worker}\n")
    if payload.sleep:
        ctx.wait(payload.sleep)
        ctx.check_stop()
    end = time.time_ns() // 1_000_000
    line = f"{ctx.job.id} {ctx.attempt} {ctx.worker} {start} {end}\n".encode()
    fd = os.open(payload.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    return {"attempt": ctx.attempt, "worker": ctx.worker}


class SpawnPayload(Payload):
    children: int = 2


def spawn(payload: SpawnPayload, ctx: JobContext) -> str:
    for index in range(payload.children):
        ctx.enqueue("noop", {}, idempotency_key=f"{ctx.job.id}-{index}")
    return "spawned"


@hookimpl
def jobcore_register_job_types(register: Callable[[JobType], None]) -> None:
    register(JobType(name="stamp", payload_model=StampPayload, handler=stamp))
    register(JobType(name="spawn", payload_model=SpawnPayload, handler=spawn))
    register(JobType(name="beats", payload_model=BeatsPayload, handler=beats))
