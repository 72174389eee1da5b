"""Job types for tests, loadable in worker subprocesses with JOBCORE_PLUGINS=jobcore_test_plugin."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import Field

from jobcore import JobContext, JobType, Payload, PermanentError, RetryAfter, hookimpl


class RecordPayload(Payload):
    log: str
    sleep: float = 0.0


def record(payload: RecordPayload, ctx: JobContext) -> dict[str, object]:
    """Append `id attempt worker` to a log file (O_APPEND), optionally sleeping first."""
    if payload.sleep:
        time.sleep(payload.sleep)
    line = f"{ctx.job.id} {ctx.attempt} {ctx.worker}\n".encode()
    fd = os.open(payload.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    return {"attempt": ctx.attempt}


class SleepPayload(Payload):
    seconds: float = Field(ge=0)
    started: str | None = None  # a file created when the handler starts
    cooperative: bool = False  # return early (Interrupted) when asked to stop


def sleepy(payload: SleepPayload, ctx: JobContext) -> dict[str, float]:
    if payload.started:
        Path(payload.started).write_text(f"{ctx.job.id} {ctx.attempt}\n")
    if payload.cooperative:
        if ctx.wait(payload.seconds):
            ctx.check_stop()
    else:
        time.sleep(payload.seconds)
    return {"slept": payload.seconds}


class SpanPayload(Payload):
    log: str
    seconds: float = Field(default=0.0, ge=0)


def span(payload: SpanPayload, ctx: JobContext) -> None:
    """Append `start|end id attempt monotonic` lines around a sleep that ignores stop requests."""
    for mark in ("start", "end"):
        if mark == "end":
            time.sleep(payload.seconds)
        line = f"{mark} {ctx.job.id} {ctx.attempt} {time.monotonic()}\n".encode()
        fd = os.open(payload.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


class CrashPayload(Payload):
    started: str | None = None
    code: int = 3


def crash(payload: CrashPayload, ctx: JobContext) -> None:
    if payload.started:
        Path(payload.started).write_text(f"{ctx.job.id} {ctx.attempt}\n")
    os._exit(payload.code)


class FailPayload(Payload):
    how: str = "error"  # error | permanent | retry_after
    seconds: float = 0.0
    message: str = "it broke"


def fail(payload: FailPayload, ctx: JobContext) -> None:
    if payload.how == "permanent":
        raise PermanentError(payload.message)
    if payload.how == "retry_after":
        raise RetryAfter(payload.seconds, payload.message)
    raise ValueError(payload.message)


class FlakyPayload(Payload):
    fail_times: int = 1


def flaky(payload: FlakyPayload, ctx: JobContext) -> str:
    if ctx.attempt <= payload.fail_times:
        raise ConnectionError(f"flaky on attempt {ctx.attempt}")
    return f"ok on attempt {ctx.attempt}"


class ParentPayload(Payload):
    children: int = 2
    fail: bool = False


def parent(payload: ParentPayload, ctx: JobContext) -> str:
    for index in range(payload.children):
        ctx.enqueue("noop", {}, idempotency_key=f"{ctx.job.id}-{index}")
    if payload.fail:
        raise PermanentError("parent failed after enqueuing children")
    return "spawned"


@hookimpl
def jobcore_register_job_types(register: Callable[[JobType], None]) -> None:
    register(JobType(name="record", payload_model=RecordPayload, handler=record))
    register(JobType(name="sleepy", payload_model=SleepPayload, handler=sleepy))
    register(JobType(name="crash", payload_model=CrashPayload, handler=crash))
    register(JobType(name="span", payload_model=SpanPayload, handler=span))
    register(JobType(name="fail", payload_model=FailPayload, handler=fail))
    register(JobType(name="parent", payload_model=ParentPayload, handler=parent))
    register(JobType(name="flaky", payload_model=FlakyPayload, handler=flaky))
