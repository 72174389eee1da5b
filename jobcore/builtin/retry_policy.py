"""Built-in retry decision: the type's exponential-backoff policy."""

from __future__ import annotations

from jobcore.hookspecs import hookimpl
from jobcore.models import Job
from jobcore.retry import RetryDecision, RetryPolicy


@hookimpl(trylast=True)
def jobcore_retry_decision(job: Job, error: BaseException, policy: RetryPolicy) -> RetryDecision:
    return policy.decide(job, error)
