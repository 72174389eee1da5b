"""Job types declared with `@job_type` for the asyncio tests (JOBCORE_PLUGINS=jobcore_async_plugin).

Each appends `event job_id attempt worker [extra]` lines to the file named in its payload, so
tests in another process can see what ran, when it was cancelled and why.
"""

from __future__ import annotations

import asyncio
import os
import time

from pydantic import Field

from jobcore import JobContext, Payload, PermanentError, RetryAfter, job_type


def note(path: str, event: str, ctx: JobContext, extra: str = "") -> None:
    line = f"{event} {ctx.job.id} {ctx.attempt} {ctx.worker} {extra}".rstrip() + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


class AsyncPayload(Payload):
    log: str
    sleep: float = Field(default=0.0, ge=0)
    first_sleep: float = Field(default=0.0, ge=0)  # slept instead of `sleep` on attempt 1
    how: str = "ok"  # ok error permanent retry_after child ignore_cancel(_await) block crash exit
    # generator_exit stop_loop late_child


LEFT_BEHIND: set[asyncio.Future[None]] = set()


async def enqueue_late(payload: AsyncPayload, ctx: JobContext) -> None:
    await asyncio.sleep(0.3)
    try:
        ctx.enqueue("noop", {})
    except Exception as exc:
        note(payload.log, "late-child-refused", ctx, type(exc).__name__)
    else:
        note(payload.log, "late-child-taken", ctx)


@job_type("async_job", max_attempts=3)
async def async_job(payload: AsyncPayload, ctx: JobContext) -> dict[str, object]:
    """An async def handler: awaits `sleep`, then does what `how` says."""
    note(payload.log, "start", ctx)
    if payload.how == "crash":
        os._exit(3)
    if payload.how == "exit":
        await asyncio.sleep(0)
        raise SystemExit(3)  # must end this attempt only, never the worker's event loop
    if payload.how == "generator_exit":
        await asyncio.sleep(0)
        raise GeneratorExit  # a BaseException that escapes an except across tasks
    if payload.how == "stop_loop":
        asyncio.get_running_loop().stop()  # must not end the loop for the other jobs
    seconds = payload.first_sleep if ctx.attempt == 1 and payload.first_sleep else payload.sleep
    if payload.how == "block":
        time.sleep(seconds)  # blocks the event loop on purpose
    else:
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            note(payload.log, "cancelled", ctx, f"{ctx.stop_reason} {ctx.should_stop}")
            if payload.how not in ("ignore_cancel", "ignore_cancel_await"):
                raise
            try:
                while True:  # swallows every cancellation
                    try:
                        await asyncio.sleep(3600)
                    except asyncio.CancelledError:
                        note(payload.log, "cancelled-again", ctx)
            finally:
                if payload.how == "ignore_cancel_await":  # awaits again while closed
                    note(payload.log, "finally", ctx)
                    await asyncio.sleep(0.1)
                    note(payload.log, "finally-awaited", ctx)
    if payload.how == "error":
        raise ValueError("async handler failed as asked")
    if payload.how == "permanent":
        raise PermanentError("async handler gave up as asked")
    if payload.how == "retry_after":
        raise RetryAfter(30)
    if payload.how == "child":
        ctx.enqueue("noop", {})  # committed with this job's completion
    if payload.how == "late_child":  # a task outliving the handler enqueues a child later
        LEFT_BEHIND.add(asyncio.ensure_future(enqueue_late(payload, ctx)))
    note(payload.log, "end", ctx)
    return {"attempt": ctx.attempt, "async": True}


@job_type("async_stopped")
async def async_stopped(payload: AsyncPayload, ctx: JobContext) -> None:
    """Awaits `ctx.stopped()` beside its work; notes the reason once cancelled."""
    watcher = asyncio.ensure_future(ctx.stopped())
    note(payload.log, "start", ctx)
    try:
        await asyncio.sleep(payload.sleep)
    except asyncio.CancelledError:
        reason = await watcher
        note(payload.log, "stopped", ctx, f"{reason} {ctx.should_stop}")
        raise


@job_type("sync_job")
def sync_job(payload: AsyncPayload, ctx: JobContext) -> dict[str, object]:
    """A plain def handler declared the same way."""
    note(payload.log, "start", ctx)
    time.sleep(payload.sleep)
    if payload.how == "error":
        raise ValueError("sync handler failed as asked")
    note(payload.log, "end", ctx)
    return {"attempt": ctx.attempt, "async": False}
