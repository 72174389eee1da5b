"""A remote attempt's failure, decided as the local worker decides it: the retry policy
(plugins' `jobcore_retry_decision` first), and a hook that raises falls back to the
policy instead of failing the request (a batch of reports carrying that failure would
fail each time the agent sends it, and none of its other reports would be recorded)."""

from __future__ import annotations

import logging

from jobcore.attempt import describe_error
from jobcore.errors import PermanentError
from jobcore.models import Failed, Job, Lease, Retrying
from jobcore.queue import Queue
from jobcore.transitions import DEFAULT_MAX_RETRY_DELAY_MS, clamp_delay_ms

log = logging.getLogger("jobcore.http")


def retry_delay_ms(queue: Queue, job: Job, error: BaseException) -> int | None:
    """Milliseconds until the next attempt (clamped), or None to fail the job; never raises."""
    try:
        delay = queue.decide_retry(job, error).delay
    except Exception as hook_error:
        log.error(
            "retry decision failed for job %s (%s); using the default policy",
            job.id,
            describe_error(hook_error),
        )
        try:
            delay = queue.policy_for(job.type).decide(job, error).delay
        except Exception:
            delay = None if isinstance(error, PermanentError) else 0.0
    if delay is None:
        return None
    try:
        seconds = float(delay)
    except (TypeError, ValueError, OverflowError):  # a plugin's decision that is not a number
        seconds = 0.0
    return clamp_delay_ms(seconds * 1000, DEFAULT_MAX_RETRY_DELAY_MS)


def failure_outcome(
    queue: Queue, job: Job, reason: str, *, retryable: bool, retry_in: float | None
) -> Failed | Retrying:
    """The outcome of an agent's failure report of `job` (its live claim): `retry_in`
    (seconds) instead of the policy while attempts remain; not `retryable`: failed."""
    lease = Lease.of(job)
    delay_ms: int | None = None
    if retryable and retry_in is not None:
        if job.attempts < job.max_attempts:
            delay_ms = clamp_delay_ms(retry_in * 1000, DEFAULT_MAX_RETRY_DELAY_MS)
    elif retryable:
        delay_ms = retry_delay_ms(queue, job, RuntimeError(reason))
    if delay_ms is None:
        return Failed(lease, reason)
    return Retrying(lease, reason, delay_ms)


def hold_limit(queue: Queue, job_id: str, seconds: float) -> None:
    """A live agent's `RetryAfter(seconds, limit=True)`: hold the job's narrowest rate limit
    full (DESIGN §16); a store error is logged, the failure report still goes ahead."""
    try:
        queue.storage.push_rate(job_id, seconds)
    except Exception as exc:
        log.error("job %s: holding its rate limit failed: %s", job_id, describe_error(exc))
