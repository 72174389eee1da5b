"""The retry decision: a pure function of the job, the error and the policy."""

from __future__ import annotations

import random
from dataclasses import dataclass

from jobcore.errors import InvalidPayload, PermanentError, RetryAfter
from jobcore.models import Job


@dataclass(frozen=True, slots=True)
class RetryDecision:
    """`delay` seconds until the next attempt, or None to fail the job now."""

    delay: float | None
    reason: str = ""

    @classmethod
    def retry_in(cls, seconds: float, reason: str = "") -> RetryDecision:
        return cls(delay=max(0.0, float(seconds)), reason=reason)

    @classmethod
    def fail(cls, reason: str = "") -> RetryDecision:
        return cls(delay=None, reason=reason)

    @property
    def retries(self) -> bool:
        return self.delay is not None


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with jitter: `base * 2**(attempt-1)`, capped, then jittered down.

    `jitter` is the fraction of the delay that may be taken off at random,
    so concurrent failures spread out instead of retrying in lockstep.
    """

    base: float = 1.0
    cap: float = 300.0
    jitter: float = 0.25

    def backoff(self, attempt: int, rng: random.Random | None = None) -> float:
        raw = min(self.cap, self.base * (2.0 ** max(0, attempt - 1)))
        if self.jitter <= 0 or raw <= 0:
            return raw
        draw = (rng or random).random()
        return raw * (1.0 - self.jitter * draw)

    def decide(
        self, job: Job, error: BaseException, rng: random.Random | None = None
    ) -> RetryDecision:
        if isinstance(error, PermanentError | InvalidPayload):
            return RetryDecision.fail("permanent error")
        if job.attempts >= job.max_attempts:
            return RetryDecision.fail(f"attempts exhausted ({job.attempts}/{job.max_attempts})")
        if isinstance(error, RetryAfter):
            return RetryDecision.retry_in(error.seconds, "retry-after requested")
        return RetryDecision.retry_in(self.backoff(job.attempts, rng), "backoff")
