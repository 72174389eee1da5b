"""Transactions that lock several claimed rows take them in job id order: a heartbeat
(`extend_leases`) and a group commit (start markers, then outcomes) of the same
worker, interleaved on two real connections, both finish instead of deadlocking.

Each test holds one row with a third connection so that the two writers meet in
the worst order: the first writer takes a row, then waits for the held one; the
second takes (before the fix) a row the first still needs, then waits for the
first writer's row. Released, the first writer needs the second's row: a cycle
the server breaks by failing one of them ("deadlock detected").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from jobcore_postgres.storage import PostgresStorage
from pg_testing import new_job
from test_pg_query_plans import Plans, bloat, nodes

from jobcore.models import Completed, Failed, JobStatus, Lease, NewJob

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


@pytest.mark.parametrize(
    ("beat_order", "held", "completed", "started"),
    [
        # the keeper sends its leases in the order it holds them, not in id order
        pytest.param((0, 2, 1), 2, 0, 1, id="heartbeat-in-claim-order"),
        # each statement in id order, but the start marker's row before the outcome's
        pytest.param((0, 1, 2), 1, 0, 2, id="commit-in-two-runs"),
    ],
)
def test_a_heartbeat_and_a_group_commit_meeting_in_the_worst_order_both_finish(
    pg_storage_factory: Factory,
    blocker: psycopg.Connection[Any],
    beat_order: tuple[int, ...],
    held: int,
    completed: int,
    started: int,
) -> None:
    storage = pg_storage_factory()
    leases = _claimed(storage, 3)
    assert storage.mark_started([leases[completed]]) == {leases[completed].job_id}
    owned, (recorded, claimed) = _meet(
        storage,
        blocker,
        lambda: storage.extend_leases([leases[i] for i in beat_order], lease_ms=LEASE_MS),
        lambda: storage.commit_batch(
            [Completed(leases[completed], "done")],
            worker="w1",
            claim_limit=0,
            lease_ms=LEASE_MS,
            promote=False,
            started=[leases[started]],
            start=0,
        ),
        held=leases[held].job_id,
    )
    # nothing was lost: the outcome and the start marker are recorded, and every
    # lease still held was extended (the heartbeat went first, the outcome after it)
    assert [(r.state, r.job and r.job.status) for r in recorded] == [
        ("recorded", JobStatus.COMPLETED)
    ]
    assert claimed == []
    assert set(owned) == {lease.job_id for lease in leases}
    jobs = {lease.job_id: storage.get(lease.job_id) for lease in leases}
    assert jobs[leases[completed].job_id].status == JobStatus.COMPLETED  # type: ignore[union-attr]
    assert jobs[leases[started].job_id].started_at is not None  # type: ignore[union-attr]
    assert jobs[leases[held].job_id].status == JobStatus.CLAIMED  # type: ignore[union-attr]


@pytest.mark.parametrize("last_outcome", [Failed, Completed], ids=["two-kinds", "one-kind"])
def test_outcomes_reported_out_of_id_order_and_a_heartbeat_both_finish(
    pg_storage_factory: Factory, blocker: psycopg.Connection[Any], last_outcome: type
) -> None:
    """`record` runs one statement per kind of outcome (here a failure's before a
    completion's), each taking its rows in the order reported unless sorted."""
    storage = pg_storage_factory()
    first, middle, last = _claimed(storage, 3)
    outcomes = [
        Failed(last, "boom") if last_outcome is Failed else Completed(last, None),
        Completed(first, None),
    ]
    owned, recorded = _meet(
        storage,
        blocker,
        lambda: storage.extend_leases([first, middle, last], lease_ms=LEASE_MS),
        lambda: storage.record(outcomes),
        held=middle.job_id,
    )
    assert [r.state for r in recorded] == ["recorded", "recorded"]
    assert [r.job.id for r in recorded if r.job is not None] == [last.job_id, first.job_id]
    assert set(owned) == {first.job_id, middle.job_id, last.job_id}


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


def test_a_commit_with_starts_and_outcomes_locks_and_marks_in_one_statement(
    pg_storage_factory: Factory,
) -> None:
    """The start markers lock the outcomes' rows as well (in id order): no separate lock
    statement in the group commit's trip, and what it answers is unchanged."""
    storage = pg_storage_factory(pool_min=1, pool_max=1)
    leases = _claimed(storage, 4)
    gone = Lease(leases[3].job_id, "not-its-lease", "w1")  # a marker whose lease is gone
    plans = Plans(storage, "auto")
    recorded, _ = storage.commit_batch(
        [Completed(leases[0], None), Failed(leases[2], "boom")],
        worker="w1",
        claim_limit=0,
        lease_ms=LEASE_MS,
        started=[leases[1], gone],
    )
    assert [r.job.status for r in recorded if r.job is not None] == [
        JobStatus.COMPLETED,
        JobStatus.FAILED,
    ]
    assert storage.marked_seen() == {leases[1].job_id}
    assert storage.get(leases[1].job_id).started_at is not None  # type: ignore[union-attr]
    assert storage.get(leases[3].job_id).started_at is None  # type: ignore[union-attr]
    texts = [plan["Query Text"] for plan in plans.seen]
    assert not [t for t in texts if t.lstrip().startswith("SELECT l.id FROM unnest")], texts
    [marking] = [t for t in texts if "v.mark" in t]
    assert "FOR NO KEY UPDATE" in marking


def test_the_lock_and_mark_statement_locks_in_report_order_under_generic_plans(
    pg_storage_factory: Factory,
) -> None:
    """Its reports drive a nested loop that locks each row by primary key (the order sent,
    job id order) on a table with finished rows and dead row versions, prepared or not."""
    storage = pg_storage_factory(pool_min=1, pool_max=1)
    bloat(storage)
    storage.insert([new_job() for _ in range(56)])
    jobs = storage.claim(worker="w", limit=56, lease_ms=LEASE_MS, start=0)
    leases = sorted((Lease.of(job) for job in jobs), key=lambda lease: lease.job_id)
    plans = Plans(storage, "force_generic_plan")
    for round_ in range(7):  # past psycopg's prepare threshold
        chunk = leases[round_ * 8 : (round_ + 1) * 8]
        storage.commit_batch(
            [Completed(lease, None) for lease in chunk[::2]],
            worker="w",
            claim_limit=0,
            lease_ms=LEASE_MS,
            promote=False,
            started=chunk[1::2],
        )
        assert storage.marked_seen() == {lease.job_id for lease in chunk[1::2]}
    found = [plan for plan in plans.seen if "v.mark" in plan["Query Text"]]
    assert len(found) == 7
    for plan in found:
        kinds = [(n["Node Type"], n.get("Index Name")) for n in nodes(plan["Plan"])]
        [loop] = [n for n in nodes(plan["Plan"]) if n["Node Type"] == "Nested Loop"]
        outer, inner = loop["Plans"]
        assert outer["Node Type"] == "Function Scan", kinds  # the reports, in order
        assert "LockRows" in [n["Node Type"] for n in nodes(inner)][:2], kinds
        assert not [k for k in kinds if k[0] in ("Seq Scan", "Bitmap Heap Scan")], kinds
