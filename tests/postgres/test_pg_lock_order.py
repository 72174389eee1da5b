"""Transactions that lock several claimed rows take them in job id order: a heartbeat
(`extend_leases`) and a group commit (start markers, then outcomes) of the same
worker, interleaved on two real connections, both finish instead of deadlocking.

Each test holds one row with a third connection so that the two writers meet in
the worst order: the heartbeat holds the first row and waits for the last, while
the commit holds (before the fix) the middle row it marks started and waits for
the first, whose outcome it records. Released, the heartbeat then needs the middle row:
a cycle the server breaks by failing one of them ("deadlock detected").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from jobcore_postgres.storage import PostgresStorage

from jobcore.models import Completed, Failed, JobStatus, Lease, NewJob
from jobcore.storage.base import Recorded

Factory = Callable[..., PostgresStorage]
LEASE_MS = 60_000


def _claimed(storage: PostgresStorage, count: int) -> list[Lease]:
    storage.insert(
        [
            NewJob(
                id=f"job-{n:02d}",
                type="noop",
                queue="default",
                payload={},
                priority=0,
                max_attempts=3,
                run_at=None,
                timeout_ms=None,
                idempotency_key=None,
            )
            for n in range(count)
        ]
    )
    jobs = storage.claim(worker="w1", limit=count, lease_ms=LEASE_MS, start=0)
    assert len(jobs) == count
    return sorted((Lease.of(job) for job in jobs), key=lambda lease: lease.job_id)


def _waiting(conn: psycopg.Connection[Any], schema: str) -> int:
    """Backends of this store waiting for a lock."""
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock' AND query LIKE %s",
        (f"%{schema}.jobs%",),
    ).fetchone()
    assert row is not None
    return int(row[0])


def _wait_for_waiters(conn: psycopg.Connection[Any], schema: str, count: int) -> None:
    deadline = time.monotonic() + 10
    while _waiting(conn, schema) < count:
        assert time.monotonic() < deadline, f"{count} lock waiter(s) never showed up"
        time.sleep(0.01)


class _Run(threading.Thread):
    """`call` in a thread of its own, keeping its answer or its exception."""

    def __init__(self, call: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self.call = call
        self.answer: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.answer = self.call()
        except BaseException as exc:  # the test reports it
            self.error = exc

    def result(self) -> Any:
        self.join(30)
        assert not self.is_alive(), "still waiting after 30 s"
        if self.error is not None:
            raise self.error
        return self.answer


@pytest.fixture
def blocker(pg_database: str) -> Iterator[psycopg.Connection[Any]]:
    """A third connection, in a transaction of its own (rolled back at the end)."""
    with psycopg.connect(pg_database) as conn:
        yield conn


def _hold_row(conn: psycopg.Connection[Any], schema: str, job_id: str) -> None:
    conn.execute(f"SELECT id FROM {schema}.jobs WHERE id = %s FOR NO KEY UPDATE", (job_id,))


def _meet(
    storage: PostgresStorage,
    blocker: psycopg.Connection[Any],
    heartbeat: Callable[[], Any],
    commit: Callable[[], Any],
    held: str,
) -> tuple[Any, Any]:
    """Hold `held`; start `heartbeat` (or any first writer), then `commit`, each once
    the one before waits for a lock; then release `held`; both answers."""
    schema = storage.schema
    watcher = psycopg.connect(blocker.info.dsn, autocommit=True)
    try:
        _hold_row(blocker, schema, held)
        beat = _Run(heartbeat)
        beat.start()
        _wait_for_waiters(watcher, schema, 1)  # the heartbeat, waiting for `held`
        batch = _Run(commit)
        batch.start()
        _wait_for_waiters(watcher, schema, 2)  # and the commit, waiting for the heartbeat
        blocker.commit()
        return beat.result(), batch.result()
    finally:
        watcher.close()


def test_a_heartbeat_and_a_group_commit_meeting_in_the_worst_order_both_finish(
    pg_storage_factory: Factory, blocker: psycopg.Connection[Any]
) -> None:
    storage = pg_storage_factory()
    first, middle, last = _claimed(storage, 3)
    assert storage.mark_started([first]) == {first.job_id}
    owned, (recorded, claimed) = _meet(
        storage,
        blocker,
        # the keeper's leases in the order it holds them, not in id order
        lambda: storage.extend_leases([first, last, middle], lease_ms=LEASE_MS),
        lambda: storage.commit_batch(
            [Completed(first, "done")],
            worker="w1",
            claim_limit=0,
            lease_ms=LEASE_MS,
            promote=False,
            started=[middle],
            start=0,
        ),
        held=last.job_id,
    )
    # whichever went first, nothing was lost: the outcome and the start marker are
    # recorded, and every lease still held was extended
    assert [(r.state, r.job and r.job.status) for r in recorded] == [
        ("recorded", JobStatus.COMPLETED)
    ]
    assert claimed == []
    assert set(owned) <= {first.job_id, middle.job_id, last.job_id}
    assert {middle.job_id, last.job_id} <= set(owned)
    jobs = {lease.job_id: storage.get(lease.job_id) for lease in (first, middle, last)}
    assert jobs[first.job_id].status == JobStatus.COMPLETED  # type: ignore[union-attr]
    assert jobs[middle.job_id].started_at is not None  # type: ignore[union-attr]
    assert jobs[last.job_id].status == JobStatus.CLAIMED  # type: ignore[union-attr]


@pytest.mark.parametrize("middle_outcome", [Failed, Completed])
def test_outcomes_reported_out_of_id_order_and_a_heartbeat_both_finish(
    pg_storage_factory: Factory, blocker: psycopg.Connection[Any], middle_outcome: type
) -> None:
    """`record` runs one statement per kind of outcome (a failure's before a
    completion's), each taking its rows in the order reported unless sorted."""
    storage = pg_storage_factory()
    first, middle, last = _claimed(storage, 3)
    outcomes = [
        Failed(middle, "boom") if middle_outcome is Failed else Completed(middle, None),
        Completed(first, None),
    ]
    owned, recorded = _meet(
        storage,
        blocker,
        lambda: storage.extend_leases([first, last, middle], lease_ms=LEASE_MS),
        lambda: storage.record(outcomes),
        held=last.job_id,
    )
    assert [r.state for r in recorded] == ["recorded", "recorded"]
    assert isinstance(recorded[0], Recorded) and recorded[0].job is not None
    assert recorded[0].job.id == middle.job_id
    assert last.job_id in owned


def test_an_operator_cancelling_several_running_jobs_and_a_group_commit_both_finish(
    pg_storage_factory: Factory, blocker: psycopg.Connection[Any]
) -> None:
    """A cancel of several jobs is one transaction of one statement per job."""
    storage = pg_storage_factory()
    first, middle, last = _claimed(storage, 3)
    cancelled, recorded = _meet(
        storage,
        blocker,
        lambda: storage.cancel([middle.job_id, last.job_id, first.job_id]),
        lambda: storage.record([Completed(first, None), Completed(middle, None)]),
        held=last.job_id,
    )
    # answers in the order asked, each job's own
    assert [job.id for job in cancelled] == [middle.job_id, last.job_id, first.job_id]
    assert all(job.cancel_requested for job in cancelled)
    assert [r.state for r in recorded] == ["recorded", "recorded"]
