"""A PostgreSQL worker leaves promotion out of the claims that notifications set off;
a group commit is one round trip.

Each full poll's claim also reads the earliest scheduled `run_at` (`look_ahead`),
so a worker knows when a scheduled job comes due without promoting on every
wake-up. These workers poll once an hour: a scheduled job that runs on time was
found through that reading, not through the periodic poll.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from jobcore_postgres.storage import PostgresStorage
from pg_testing import HOUR, start_idle_worker
from testenv import wait_for

from jobcore import JobStatus, Queue
from jobcore.models import Completed, Lease

Factory = Callable[..., PostgresStorage]


@pytest.fixture
def queue(idle_queue: Queue) -> Queue:
    return idle_queue  # conftest: workers poll hourly


def done(queue: Queue, job_id: str) -> bool:
    return queue.get(job_id).status is JobStatus.COMPLETED


def test_a_job_scheduled_by_another_connection_runs_when_due(
    queue: Queue, pg_storage_factory: Factory
) -> None:
    worker, thread = start_idle_worker(queue)
    try:
        job = queue.build("noop", {}, delay=0.5)
        pg_storage_factory().insert([job])  # its notification: a claim that reads ahead
        wait_for(lambda: done(queue, job.id), timeout=30)
        ran = queue.get(job.id)
        assert ran.claimed_at is not None
        assert ran.run_at <= ran.claimed_at < ran.run_at + 5_000
    finally:
        worker.stop()
        thread.join(10)


def test_a_scheduled_job_found_due_by_a_claim_without_promotion_runs_at_once(
    queue: Queue, pg_storage_factory: Factory
) -> None:
    worker, thread = start_idle_worker(queue)
    other = pg_storage_factory()
    try:
        later = queue.build("noop", {}, delay=HOUR)
        other.insert([later])
        # the worker read it: nothing due for an hour, its claims leave promotion out
        wait_for(lambda: worker.promotion.next_due is not None, timeout=30)
        with psycopg.connect(other.target.conninfo, autocommit=True) as conn:
            # due now, and no event, so no notification: the worker cannot know
            conn.execute(
                f"UPDATE {other.schema}.jobs SET run_at = run_at - %s WHERE id = %s",
                (int(HOUR * 1000) + 1000, later.id),
            )
        wake = queue.build("noop", {})
        other.insert([wake])  # a claim without promotion, whose reading finds `later` due
        wait_for(lambda: done(queue, wake.id), timeout=30)
        wait_for(lambda: done(queue, later.id), timeout=30)
    finally:
        worker.stop()
        thread.join(10)


def test_claims_set_off_by_notifications_leave_promotion_out(
    queue: Queue, pg_storage_factory: Factory
) -> None:
    calls: list[dict[str, Any]] = []
    commit = queue.storage.commit_batch

    def recorded(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return commit(*args, **kwargs)

    queue.storage.commit_batch = recorded  # type: ignore[method-assign]
    next_due = 0

    def counted() -> int | None:
        nonlocal next_due
        next_due += 1
        return None

    queue.storage.next_due = counted  # type: ignore[method-assign]
    worker, thread = start_idle_worker(queue)
    other = pg_storage_factory()
    try:
        del calls[:]
        next_due = 0
        for _ in range(3):
            job = queue.build("noop", {})
            other.insert([job])
            wait_for(lambda job_id=job.id: done(queue, job_id), timeout=30)
        claims = [c for c in calls if c["claim_limit"] > 0 and c.get("look_ahead")]
        assert len(claims) >= 3
        assert not any(c["promote"] for c in claims)
        assert next_due == 0  # read in the claim's own trip
    finally:
        worker.stop()
        thread.join(10)


def test_look_ahead_reads_the_earliest_scheduled_run_at(
    queue: Queue, pg_storage_factory: Factory
) -> None:
    storage = pg_storage_factory()
    assert storage.commit_batch([], worker="w", claim_limit=1, lease_ms=60_000) == ([], [])
    assert storage.scheduled_seen() is None  # not asked to look ahead
    storage.commit_batch([], worker="w", claim_limit=1, lease_ms=60_000, look_ahead=True)
    seen = storage.scheduled_seen()
    assert seen is not None and seen[0] is None
    first, second = (queue.build("noop", {}, delay=d) for d in (HOUR, 2 * HOUR))
    storage.insert([second, first])
    storage.commit_batch([], worker="w", claim_limit=1, lease_ms=60_000, look_ahead=True)
    seen = storage.scheduled_seen()
    assert seen is not None
    assert seen[0] == queue.get(first.id).run_at
    assert seen[0] - seen[1] == pytest.approx(HOUR * 1000, abs=60_000)


def test_a_group_commit_is_one_round_trip(queue: Queue, pg_storage_factory: Factory) -> None:
    # psycopg's transaction() inside a pipeline syncs after BEGIN and before COMMIT: 4 trips
    storage = pg_storage_factory(pool_max=1)
    storage.insert([queue.build("noop", {})])
    with tempfile.TemporaryFile("w+") as trace:
        with storage._pool.connection() as conn:  # the only pooled connection
            conn.pgconn.trace(trace.fileno())
        try:
            _, [job] = storage.commit_batch(
                [], worker="w", claim_limit=5, lease_ms=60_000, look_ahead=True
            )
            storage.commit_batch(
                [Completed(Lease.of(job), None)], worker="w", claim_limit=5, lease_ms=60_000
            )
        finally:
            with storage._pool.connection() as conn:
                conn.pgconn.untrace()
        trace.seek(0)
        syncs = [line for line in trace if line.rstrip().split("\t")[-3:] == ["F", "4", "Sync"]]
    assert len(syncs) == 2


def test_claims_draw_no_warnings(queue: Queue, pg_storage_factory: Factory) -> None:
    # a group commit has no BEGIN: SET LOCAL would work there, but warn at every claim
    # (and write that warning to the server's log)
    storage = pg_storage_factory(pool_max=1)
    notices: list[str] = []
    with storage._pool.connection() as conn:  # the only pooled connection
        conn.add_notice_handler(lambda notice: notices.append(notice.message_primary or ""))
    storage.insert([queue.build("noop", {}) for _ in range(3)])
    for look_ahead in (False, True):
        storage.commit_batch([], worker="w", claim_limit=1, lease_ms=60_000, look_ahead=look_ahead)
    storage.claim(worker="w", limit=1, lease_ms=60_000)
    assert queue.stats().counts.get("claimed") == 3
    assert notices == []
