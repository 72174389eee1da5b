"""One attempt of a job: run the handler through the hooks and decide the outcome."""

from __future__ import annotations

import logging
import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pluggy

from jobcore.context import JobContext
from jobcore.errors import Interrupted, JobcoreError
from jobcore.models import (
    Cancelled,
    Completed,
    Failed,
    Job,
    Lease,
    Outcome,
    Released,
    Retrying,
    compact_json,
)
from jobcore.queue import Queue
from jobcore.transitions import DEFAULT_MAX_RETRY_DELAY_MS, clamp_delay_ms

log = logging.getLogger("jobcore.worker")


def describe_error(error: BaseException) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


_PLUMBING = (
    os.path.dirname(pluggy.__file__),
    __file__,
    os.path.join("jobcore", "worker.py"),
    os.path.join("jobcore", "builtin", "execute.py"),
)


def handler_traceback(exc: BaseException) -> str:
    """The traceback of a handler's exception without pluggy's and the worker's frames."""
    frames = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if not frame.filename.startswith(_PLUMBING[0])
        and not frame.filename.endswith(_PLUMBING[1:])
    ]
    lines = traceback.format_list(frames) + traceback.format_exception_only(exc)
    return "Traceback (handler frames):\n" + "".join(lines).rstrip()


@dataclass(eq=False)
class Running:
    """A job this worker claimed: waiting for an executor (prefetched) or executing."""

    job: Job
    ctx: JobContext
    lease: Lease
    deadline: float | None  # monotonic seconds, from the job's timeout, once it began
    began: bool = False  # an executor took it (set under the worker's lock)
    started: float = 0.0
    duration_ms: float = 0.0
    abandoned: bool = False  # timed out, lost or released: its late outcome is dropped


class AttemptRunner:
    """Executes attempts on executor threads; pure with respect to the database."""

    def __init__(self, queue: Queue, *, clock: Callable[[], int], max_result_bytes: int) -> None:
        self.queue = queue
        self.pm = queue.pm
        self.clock = clock
        self.max_result_bytes = max_result_bytes
        # With only the built-in implementation registered, call handlers directly:
        # the hook machinery costs a few microseconds per job and would change nothing.
        impls = self.pm.hook.jobcore_execute_job.get_hookimpls()
        self._direct = [impl.plugin_name for impl in impls] == ["jobcore.builtin.execute"]

    def execute(self, run: Running) -> Outcome:
        """Run one attempt on this thread and turn what happened into an outcome."""
        job, ctx = run.job, run.ctx
        run.started = time.perf_counter()
        if job.timeout_ms is not None:  # the timeout counts from the handler's start
            run.deadline = time.monotonic() + job.timeout_ms / 1000
        try:
            if self._direct:
                result = ctx.job_type.handler(ctx.payload, ctx)
            else:
                result = self.pm.hook.jobcore_execute_job(job=job, ctx=ctx)
            result = self.bounded_result(job, result)
        except BaseException as exc:  # a handler must never take the worker down
            run.duration_ms = (time.perf_counter() - run.started) * 1000
            return self.failure_outcome(run, exc)
        run.duration_ms = (time.perf_counter() - run.started) * 1000
        if ctx.stop_reason == "cancel":
            return Cancelled(lease=run.lease, error="cancelled while running")
        return Completed(lease=run.lease, result=result, children=tuple(ctx.children))

    def bounded_result(self, job: Job, result: Any) -> Any:
        try:
            encoded = compact_json(result)
        except (TypeError, ValueError) as exc:
            raise JobcoreError(
                f"handler returned a result that is not JSON-serialisable: {exc}"
            ) from None
        if len(encoded) > self.max_result_bytes:
            log.warning(
                "job %s result is %d bytes, over max_result_bytes; stored truncated",
                job.id,
                len(encoded),
            )
            return {"truncated": True, "size": len(encoded), "head": encoded[:1024]}
        return result

    def failure_outcome(self, run: Running, exc: BaseException) -> Outcome:
        ctx = run.ctx
        error = describe_error(exc)
        if ctx.stop_reason == "cancel":
            return Cancelled(lease=run.lease, error=f"cancelled: {error}")
        if ctx.stop_reason == "shutdown" and isinstance(exc, Interrupted):
            return Released(lease=run.lease)
        if not isinstance(exc, JobcoreError):
            log.warning(
                "job %s (%s) attempt %d raised %s\n%s",
                run.job.id,
                run.job.type,
                run.job.attempts,
                error,
                handler_traceback(exc),
            )
        return self.retry_or_fail(run, exc, error)

    def retry_or_fail(self, run: Running, exc: BaseException, error: str) -> Outcome:
        try:
            decision = self.queue.decide_retry(run.job, exc)
        except Exception as hook_error:
            log.exception(
                "retry decision failed for job %s; retrying with default backoff", run.job.id
            )
            decision = self.queue.policy_for(run.job.type).decide(run.job, exc)
            error += f" (retry hook failed: {describe_error(hook_error)})"
        if decision.delay is None:
            return Failed(lease=run.lease, error=error)
        delay_ms = clamp_delay_ms(decision.delay * 1000, DEFAULT_MAX_RETRY_DELAY_MS)
        return Retrying(lease=run.lease, error=error, delay_ms=delay_ms)
