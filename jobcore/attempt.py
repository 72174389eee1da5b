"""One attempt of a job: run the handler through the hooks and decide the outcome.

Nothing here raises: whatever goes wrong while preparing, running or judging
an attempt (an exception whose `str()` raises, a validator raising `KeyError`,
`RetryAfter(inf)`) becomes an outcome of that job alone.
"""

from __future__ import annotations

import logging
import os
import traceback
from typing import Any

import pluggy

from jobcore.context import JobContext
from jobcore.errors import Interrupted, JobcoreError, JobTimeout, PermanentError, RetryAfter
from jobcore.execute_wrappers import ExecutePlan, call_wrapped
from jobcore.inflight import Attempt
from jobcore.models import (
    Cancelled,
    Completed,
    Failed,
    Job,
    Lease,
    Outcome,
    Released,
    Retrying,
    finite,
    strict_json,
)
from jobcore.plugins import is_ctrl_c
from jobcore.queue import Queue
from jobcore.rates import push_seconds
from jobcore.transitions import clamp_delay_ms

log = logging.getLogger("jobcore.worker")

MAX_ERROR_CHARS = 4000  # an error message longer than this is stored cut


def describe_error(error: BaseException) -> str:
    """`Type: message`, even when the exception's `str()` raises; long messages are cut."""
    name = type(error).__name__
    try:
        text = str(error)
    except Exception as inner:  # a hostile __str__ must not take the caller down
        text = f"(message unreadable: its __str__ raised {type(inner).__name__})"
    if len(text) > MAX_ERROR_CHARS:
        text = text[:MAX_ERROR_CHARS] + f"… ({len(text)} characters)"
    return f"{name}: {text}" if text else name


_PLUMBING = (
    os.path.dirname(pluggy.__file__),
    __file__,
    os.path.join("jobcore", "worker.py"),
    os.path.join("jobcore", "async_handlers.py"),
    os.path.join("jobcore", "execute_wrappers.py"),
    os.path.join("jobcore", "builtin", "execute.py"),
)


def handler_traceback(exc: BaseException) -> str:
    """The traceback of a handler's exception without pluggy's and the worker's frames."""
    try:
        frames = [
            frame
            for frame in traceback.extract_tb(exc.__traceback__)
            if not frame.filename.startswith(_PLUMBING[0])
            and not frame.filename.endswith(_PLUMBING[1:])
        ]
        lines = [*traceback.format_list(frames), describe_error(exc) + "\n"]
        return "Traceback (handler frames):\n" + "".join(lines).rstrip()
    except Exception:
        return "(traceback unavailable)"


def _safe_repr(value: Any, limit: int = 1024) -> str:
    try:
        text = repr(value)
    except Exception as exc:  # a hostile __repr__
        return f"<{type(value).__name__}: repr raised {type(exc).__name__}>"
    return text if len(text) <= limit else text[:limit] + "…"


class AttemptRunner:
    """Executes attempts on executor threads; pure with respect to the database."""

    def __init__(
        self,
        queue: Queue,
        *,
        max_result_bytes: int,
        max_retry_delay: float,
    ) -> None:
        self.queue = queue
        self.pm = queue.pm
        self.max_result_bytes = max_result_bytes
        self.max_retry_delay_ms = int(max_retry_delay * 1000)
        self.rate_holds: dict[Lease, float] = {}  # claim -> seconds (agents: see push_rate)
        # With only the built-in implementation registered, handlers are called directly;
        # with new-style wrappers around it only (e.g. otel's span), as pluggy would.
        self._plan = ExecutePlan.of(self.pm)

    pushes_rates = True
    """Whether `RetryAfter(..., limit=True)` pushes the rate window out in this process's
    store (False for agents: their fail report carries it to the hub, `rate_holds`)."""

    def execute(self, attempt: Attempt) -> Outcome:
        """Run one attempt on this thread and turn what happened into an outcome; never raises."""
        try:
            return self._execute(attempt)
        except BaseException as exc:  # the last guard: an executor thread must never die
            log.error("job %s: judging its attempt failed: %s", attempt.job.id, describe_error(exc))
            return Failed(
                lease=attempt.lease,
                error=f"jobcore could not judge the attempt: {describe_error(exc)}",
            )

    def _execute(self, attempt: Attempt) -> Outcome:
        job, ctx = attempt.job, attempt.ctx
        try:
            ctx.payload = self.queue.validate_payload(ctx.job_type, job.payload)
        except BaseException as exc:  # stored payload no longer matches, or the model broke
            return Failed(lease=attempt.lease, error=f"cannot start: {describe_error(exc)}")
        try:
            plan = self.plan()
            if plan.direct:
                result = ctx.job_type.handler(ctx.payload, ctx)
            else:
                result = self.call_hook(job, ctx, plan)
            result = self.bounded_result(job, result)
        except BaseException as exc:  # a handler must never take the worker down
            return self.failure_outcome(attempt, exc)
        if ctx.stop_reason == "cancel":
            return Cancelled(lease=attempt.lease, error="cancelled while running")
        if ctx.stop_reason == "timeout":  # it returned, but only after its time was up
            return self.timeout_outcome(attempt)
        return Completed(lease=attempt.lease, result=result, children=ctx.judged())

    def plan(self) -> ExecutePlan:
        """How to call `jobcore_execute_job` now (made again after plugins changed)."""
        plan = self._plan
        if not plan.current(self.pm):
            plan = self._plan = ExecutePlan.of(self.pm)
        return plan

    def call_hook(self, job: Job, ctx: JobContext, plan: ExecutePlan) -> Any:
        """`jobcore_execute_job` for this attempt, by `plan` (not `direct`)."""
        if plan.wrappers is not None:
            return call_wrapped(plan.wrappers, job, ctx)
        return self.pm.hook.jobcore_execute_job(job=job, ctx=ctx)

    def bounded_result(self, job: Job, result: Any) -> Any:
        if result is None and self.max_result_bytes >= 4:  # the usual result: "null" fits
            return None
        try:
            try:
                encoded = strict_json(result)
            except ValueError:  # NaN or Infinity somewhere: stored as null, as JSON allows
                result = finite(result)
                encoded = strict_json(result)
        except (TypeError, ValueError, RecursionError) as exc:
            # The handler returned: its side effects happened. Running it again for a
            # result that cannot be stored would repeat them, so it completes with a
            # description of the result instead (like an oversized one).
            error = describe_error(exc)
            log.warning(
                "job %s returned a result that is not JSON-serialisable (%s); stored its repr",
                job.id,
                error,
            )
            return {"unserialisable": error, "repr": _safe_repr(result)}
        if len(encoded) > self.max_result_bytes:
            log.warning(
                "job %s result is %d bytes, over max_result_bytes; stored truncated",
                job.id,
                len(encoded),
            )
            return {"truncated": True, "size": len(encoded), "head": encoded[:1024]}
        return result

    def failure_outcome(self, attempt: Attempt, exc: BaseException) -> Outcome:
        ctx = attempt.ctx
        error = describe_error(exc)
        if ctx.stop_reason == "cancel":
            return Cancelled(lease=attempt.lease, error=f"cancelled: {error}")
        if ctx.stop_reason == "shutdown" and isinstance(exc, Interrupted):
            return Released(lease=attempt.lease)
        if ctx.stop_reason == "timeout":  # whatever it raised on the way out, it timed out
            return self.timeout_outcome(attempt)
        if not isinstance(exc, JobcoreError):
            log.warning(
                "job %s (%s) attempt %d raised %s\n%s",
                attempt.job.id,
                attempt.job.type,
                attempt.job.attempts,
                error,
                handler_traceback(exc),
            )
        return self.retry_or_fail(attempt, exc, error)

    timeout_label = "JobTimeout"
    """How a timeout's error begins (a remote agent's: `max_runtime_exceeded`, DESIGN §11)."""

    def timeout_outcome(self, attempt: Attempt) -> Outcome:
        seconds = (attempt.job.timeout_ms or 0) / 1000
        error = f"timed out after {seconds:g}s"
        return self.retry_or_fail(attempt, JobTimeout(error), f"{self.timeout_label}: {error}")

    def retry_or_fail(self, attempt: Attempt, exc: BaseException, error: str) -> Outcome:
        """Ask the retry policy (and plugins); never raises.

        A plugin's decision that raises, even a BaseException (`SystemExit` from a hook),
        falls back to the default policy, as a notification hook's does; only Ctrl-C in
        the main thread (a worker without signal handlers) still goes up."""
        job = attempt.job
        try:
            decision = self.queue.decide_retry(job, exc)
            delay = decision.delay
        except BaseException as hook_error:
            if is_ctrl_c(hook_error):
                raise
            log.error(
                "retry decision failed for job %s (%s); using the default policy",
                job.id,
                describe_error(hook_error),
            )
            error += f" (retry hook failed: {describe_error(hook_error)})"
            try:
                delay = self.queue.policy_for(job.type).decide(job, exc).delay
            except Exception:
                delay = None if isinstance(exc, PermanentError) else 0.0
        if isinstance(exc, RetryAfter) and exc.limit:
            self.push_rate(attempt, exc.seconds)
        if delay is None:
            return Failed(lease=attempt.lease, error=error)
        try:
            delay_ms = clamp_delay_ms(delay * 1000, self.max_retry_delay_ms)
        except Exception:  # a plugin's decision that is not a number
            delay_ms = 0
        return Retrying(lease=attempt.lease, error=error, delay_ms=delay_ms)

    def push_rate(self, attempt: Attempt, seconds: float) -> None:
        """`RetryAfter(seconds, limit=True)`: hold the job's narrowest rate limit full for
        `seconds` (clamped to a day and `max_retry_delay`); never raises. Without a store
        of its own (an agent) the hold is kept in `rate_holds` for the report to carry."""
        job = attempt.job
        seconds = min(push_seconds(seconds), self.max_retry_delay_ms / 1000)
        if seconds <= 0:
            return
        if not self.pushes_rates:
            self.rate_holds[attempt.lease] = seconds
            return
        try:
            if not self.queue.storage.push_rate(job.id, seconds):
                log.info("job %s: RetryAfter(limit=True) but no rate limit applies", job.id)
        except Exception as exc:  # the retry itself still goes ahead
            log.error("job %s: pushing its rate limit out failed: %s", job.id, describe_error(exc))
