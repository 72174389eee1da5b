"""A worker's commit under concurrency limits (DESIGN §16) on PostgreSQL is one transaction:
its outcomes, the limits' advisory lock and the claim commit or roll back together, also
when an outcome inserts children (`Completed.children`, a savepoint of its own), when an
outcome cannot go in, and when the connection dies before the commit."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
from jobcore_postgres.storage import PostgresStorage
from pg_testing import new_job

from jobcore.models import Completed, JobStatus, Lease

Factory = Callable[..., PostgresStorage]


def _xids(storage: PostgresStorage) -> dict[tuple[str, str], str]:
    """The transaction id of each (event kind, job id)."""
    with psycopg.connect(storage.target.conninfo, autocommit=True) as conn:
        rows = conn.execute(f"SELECT kind, job_id, xid::text FROM {storage.schema}.events")
        return {(str(kind), str(job)): str(xid) for kind, job, xid in rows}


def test_a_completion_with_children_and_the_limited_claim_are_one_transaction(
    pg_storage_factory: Factory,
) -> None:
    # the children's savepoint must not end the claim's transaction (and its advisory
    # lock) before the claim: it would claim on counts another claimer may be changing
    storage = pg_storage_factory()
    storage.set_limit("type", "noop", 2)
    storage.insert([new_job(priority=1), new_job(), new_job()])
    [first] = storage.claim(worker="w", limit=1, lease_ms=60_000)
    child = new_job("child")
    recorded, claimed = storage.commit_batch(
        [Completed(Lease.of(first), None, (child,))], worker="w", claim_limit=5, lease_ms=60_000
    )
    assert [r.state for r in recorded] == ["recorded"]
    [second] = [job for job in claimed if job.type == "noop"]
    xids = _xids(storage)
    completed = xids[("job:completed", first.id)]
    assert xids[("job:enqueued", child.id)] == completed
    assert xids[("job:claimed", second.id)] == completed, xids  # the same transaction


def test_an_outcome_beside_a_child_that_cannot_go_in_stays_recorded(
    pg_storage_factory: Factory,
) -> None:
    # a child whose id is taken fails its parent alone (DESIGN §6); the other outcome of
    # the commit, answered "recorded", must be what the store holds
    storage = pg_storage_factory()
    storage.set_limit("type", "noop", 5)
    taken = new_job("other")
    storage.insert([new_job(), new_job(), taken])
    fine, bad = storage.claim(worker="w", limit=2, lease_ms=60_000, types=["noop"])
    recorded, claimed = storage.commit_batch(
        [Completed(Lease.of(fine), "ok"), Completed(Lease.of(bad), None, (new_job(id=taken.id),))],
        worker="w",
        claim_limit=5,
        lease_ms=60_000,
    )
    assert [(r.state, r.job and r.job.status) for r in recorded] == [
        ("recorded", JobStatus.COMPLETED),
        ("recorded", JobStatus.FAILED),
    ]
    for answer in recorded:
        assert answer.job is not None
        stored = storage.get(answer.job.id)
        assert stored is not None and stored.status is answer.job.status
    assert [job.id for job in claimed] == [taken.id]
