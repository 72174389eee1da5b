"""The state-machine table itself: complete, unambiguous, and what `apply` makes of it."""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

import pytest

from jobcore import transitions as T
from jobcore.models import (
    Cancelled,
    Completed,
    Failed,
    Job,
    JobStatus,
    Lease,
    NewJob,
    Outcome,
    Released,
    Retrying,
    job_from_values,
    job_values,
    replace_job,
)
from jobcore.storage.rows import new_row

NOW = 1_800_000_000_000


def claimed_job(**changes: Any) -> Job:
    values: dict[str, Any] = {
        "id": "j1",
        "type": "noop",
        "queue": "default",
        "payload": {},
        "status": JobStatus.CLAIMED,
        "priority": 0,
        "attempts": 2,
        "max_attempts": 3,
        "run_at": NOW - 10,
        "timeout_ms": None,
        "idempotency_key": None,
        "locked_by": "w1",
        "locked_at": NOW - 5,
        "lease_expires_at": NOW + 1000,
        "heartbeat_at": NOW - 5,
        "cancel_requested": False,
        "last_error": None,
        "errors": [],
        "result": None,
        "parent_id": None,
        "meta": {},
        "created_at": NOW - 100,
        "claimed_at": NOW - 5,
        "completed_at": None,
        "updated_at": NOW - 5,
        "lease_id": "L1",
        "started_at": NOW - 4,
        "history": [],
    }
    values.update(changes)
    return Job(**values)


LEASE = Lease("j1", "L1", "w1")
OUTCOMES: list[Outcome] = [
    Completed(LEASE, {"ok": True}),
    Retrying(LEASE, "boom", 500),
    Retrying(LEASE, "now", 0),
    Failed(LEASE, "bad"),
    Released(LEASE),
    Cancelled(LEASE, "stop"),
]


@pytest.mark.parametrize("outcome", OUTCOMES, ids=lambda o: type(o).__name__)
@pytest.mark.parametrize("cancel_requested", [False, True])
def test_exactly_one_owner_transition_applies(outcome: Outcome, cancel_requested: bool) -> None:
    job = claimed_job(cancel_requested=cancel_requested)
    rules = T.owner_transitions(outcome)
    applicable = [t for t in rules if t.applies(job, now=NOW, lease_id="L1", worker="w1")]
    assert len(applicable) == 1
    assert not any(t.applies(job, now=NOW, lease_id="L2", worker="w1") for t in rules)
    # the lease id alone is no fence: another worker holding it changes nothing
    assert not any(t.applies(job, now=NOW, lease_id="L1", worker="w2") for t in rules)


@pytest.mark.parametrize("outcome", OUTCOMES, ids=lambda o: type(o).__name__)
def test_a_cancel_request_ends_released_and_retried_jobs_cancelled(outcome: Outcome) -> None:
    job = claimed_job(cancel_requested=True)
    [rule] = [
        t
        for t in T.owner_transitions(outcome)
        if t.applies(job, now=NOW, lease_id="L1", worker="w1")
    ]
    after = T.apply(job, rule, now=NOW, outcome=outcome)
    expected = {
        Completed: JobStatus.COMPLETED,
        Failed: JobStatus.FAILED,
    }.get(type(outcome), JobStatus.CANCELLED)
    assert after.status is expected


@pytest.mark.parametrize(
    ("cancel", "started", "left"), list(itertools.product([False, True], repeat=3))
)
def test_the_sweep_rules_cover_every_expired_claim_once(
    cancel: bool, started: bool, left: bool
) -> None:
    job = claimed_job(
        cancel_requested=cancel,
        started_at=NOW - 4 if started else None,
        attempts=2 if left else 3,
        lease_expires_at=NOW - 1,
    )
    [(rule, action)] = [(t, a) for t, a in T.SWEEP if t.applies(job, now=NOW)]
    expected = (
        "cancelled" if cancel else "released" if not started else "reclaimed" if left else "failed"
    )
    assert action == expected
    after = T.apply(job, rule, now=NOW)
    assert after.history[-1]["outcome"] == action
    assert after.attempts == job.attempts - (1 if action == "released" else 0)
    live = claimed_job(cancel_requested=cancel, lease_expires_at=NOW + 1)
    assert not any(t.applies(live, now=NOW) for t, _ in T.SWEEP)


def test_every_transition_out_of_a_claim_ends_it_and_says_so() -> None:
    for t in T.ALL:
        leaves_claim = JobStatus.CLAIMED in t.from_status and t.to_status != JobStatus.CLAIMED
        if not leaves_claim:
            continue
        assert t.lock in (T.Lock.END_KEEP_WORKER, T.Lock.END_CLEAR_WORKER), t.name
        assert t.event is not None, t.name
        assert t.history is not None or t is T.FAIL_UNRECORDABLE, t.name
        finished = t.to_status in (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED)
        assert t.finishes == finished, t.name
        assert (t.lock is T.Lock.END_KEEP_WORKER) == finished, t.name
    assert {t.event for t in T.ALL if t.event} <= set(T.EVENT_KINDS)


def test_apply_of_a_retry_and_a_completion() -> None:
    job = claimed_job()
    retry = T.apply(job, T.RETRY, now=NOW, outcome=Retrying(LEASE, "boom", 500))
    assert (retry.status, retry.run_at, retry.locked_by, retry.started_at) == (
        JobStatus.SCHEDULED,
        NOW + 500,
        None,
        None,
    )
    assert retry.lease_id == "L1" and retry.attempts == 2
    assert retry.errors == [{"attempt": 2, "error": "boom", "worker": "w1", "at": NOW}]
    assert retry.history == [
        {
            "attempt": 2,
            "lease_id": "L1",
            "worker": "w1",
            "started_at": NOW - 4,
            "ended_at": NOW,
            "outcome": "retrying",
            "error": "boom",
        }
    ]
    done = T.apply(
        job, T.COMPLETE, now=NOW, outcome=Completed(LEASE, 7), current={"started_at": NOW - 1}
    )
    assert (done.status, done.result, done.completed_at, done.locked_by) == (
        JobStatus.COMPLETED,
        7,
        NOW,
        "w1",
    )
    assert done.started_at == NOW - 1 and done.history[-1]["started_at"] == NOW - 1
    assert T.recorded_as(Retrying(LEASE, "x")) == {"retrying", "cancelled"}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, 0),
        (-5, 0),
        (float("nan"), 0),
        (1500.7, 1500),
        (float("inf"), T.DEFAULT_MAX_RETRY_DELAY_MS),
        (10**30, T.DEFAULT_MAX_RETRY_DELAY_MS),
        ("not a number", 0),
        (None, 0),
    ],
)
def test_delays_are_clamped(value: Any, expected: int) -> None:
    assert T.clamp_delay_ms(value, T.DEFAULT_MAX_RETRY_DELAY_MS) == expected
    assert not math.isnan(T.clamp_delay_ms(value))


def test_job_json_carries_the_lease_and_history_and_attempts_detail() -> None:
    entry = {
        "attempt": 1,
        "lease_id": "L0",
        "worker": "w0",
        "started_at": NOW - 50,
        "ended_at": NOW - 40,
        "outcome": "retrying",
        "error": "e",
    }
    job = claimed_job(history=[entry])
    data = job.to_json()
    assert data["lease_id"] == "L1" and data["started_at"].endswith("Z")
    assert data["history"][0]["ended_at"].endswith("Z") and data["history"][0]["error"] == "e"
    detail = job.attempts_detail()
    assert detail[0] == entry
    assert detail[1]["outcome"] == "running" and detail[1]["lease_id"] == "L1"
    assert claimed_job(status=JobStatus.PENDING).attempts_detail() == []
    assert Lease.of(job) == Lease("j1", "L1", "w1")
    with pytest.raises(ValueError, match="carries no lease"):
        Lease.of(claimed_job(lease_id=None))


def test_new_row_is_the_job_an_insert_writes() -> None:
    """`new_row` builds its Job by position: every field must land where `Job` has it."""
    new = NewJob(
        id="j1",
        type="t",
        queue="q",
        payload={"a": 1},
        priority=3,
        max_attempts=4,
        run_at=None,
        timeout_ms=5000,
        idempotency_key="k",
        parent_id="p",
        meta={"m": 1},
        delay_ms=10,
    )
    expected = Job(
        id="j1",
        type="t",
        queue="q",
        payload={"a": 1},
        status=JobStatus.SCHEDULED,
        priority=3,
        attempts=0,
        max_attempts=4,
        run_at=110,
        timeout_ms=5000,
        idempotency_key="k",
        locked_by=None,
        locked_at=None,
        lease_expires_at=None,
        heartbeat_at=None,
        cancel_requested=False,
        last_error=None,
        errors=[],
        result=None,
        parent_id="p",
        meta={"m": 1},
        created_at=100,
        claimed_at=None,
        completed_at=None,
        updated_at=100,
    )
    row = new_row(new, 100)
    assert row == expected
    assert row.meta is not new.meta and row.errors is not new_row(new, 100).errors
    assert new_row(dataclasses.replace(new, delay_ms=0), 200).status is JobStatus.PENDING
    assert new_row(new, 100, run_at=50, status=JobStatus.PENDING).run_at == 50


def test_replace_job_matches_dataclasses_replace() -> None:
    job = claimed_job()
    assert replace_job(job, started_at=5, attempts=2) == dataclasses.replace(
        job, started_at=5, attempts=2
    )
    assert replace_job(job) == job and replace_job(job) is not job
    assert job_from_values(job_values(job)) == job
    with pytest.raises(TypeError):
        job_from_values(job_values(job)[:-1])
