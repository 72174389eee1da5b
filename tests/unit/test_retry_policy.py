"""The default retry decision is a pure function: table-driven, no database."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from jobcore import Interrupted, InvalidPayload, PermanentError, RetryAfter, RetryPolicy
from jobcore.models import Job, JobStatus

JOB = Job(
    id="j",
    type="t",
    queue="default",
    payload={},
    status=JobStatus.CLAIMED,
    priority=0,
    attempts=1,
    max_attempts=3,
    run_at=0,
    timeout_ms=None,
    idempotency_key=None,
    locked_by="w",
    locked_at=0,
    lease_expires_at=0,
    heartbeat_at=0,
    cancel_requested=False,
    last_error=None,
    errors=[],
    result=None,
    parent_id=None,
    meta={},
    created_at=0,
    claimed_at=0,
    completed_at=None,
    updated_at=0,
)


@pytest.mark.parametrize(
    ("attempts", "error", "delay"),
    [
        (1, ValueError("x"), 1.0),
        (2, ValueError("x"), 2.0),
        (3, ValueError("x"), None),  # exhausted
        (1, PermanentError("x"), None),
        (1, InvalidPayload("x"), None),
        (1, RetryAfter(42), 42.0),
        (3, RetryAfter(42), None),  # RetryAfter is still bounded by max_attempts
        (1, Interrupted("x"), 1.0),
    ],
)
def test_decision_table(attempts: int, error: BaseException, delay: float | None) -> None:
    decision = RetryPolicy(base=1.0, cap=300.0, jitter=0.0).decide(
        replace(JOB, attempts=attempts), error
    )
    assert decision.delay == delay
    assert decision.retries is (delay is not None)


def test_backoff_doubles_and_is_capped() -> None:
    policy = RetryPolicy(base=2.0, cap=10.0, jitter=0.0)
    assert [policy.backoff(n) for n in range(1, 6)] == [2.0, 4.0, 8.0, 10.0, 10.0]


def test_jitter_only_shortens_within_its_fraction() -> None:
    policy = RetryPolicy(base=8.0, cap=100.0, jitter=0.25)
    rng = random.Random(7)
    delays = [policy.backoff(1, rng) for _ in range(200)]
    assert all(6.0 <= d <= 8.0 for d in delays)
    assert len(set(delays)) > 100  # actually spread out


@pytest.mark.parametrize("seconds", [-1.0, float("nan"), float("-inf")])
def test_retry_after_refuses_a_delay_that_is_not_a_number_at_least_zero(seconds: float) -> None:
    # NaN compared false with 0 and so passed the check: a retry at once, spending the attempts
    with pytest.raises(ValueError, match="RetryAfter seconds must be a number >= 0"):
        RetryAfter(seconds)
