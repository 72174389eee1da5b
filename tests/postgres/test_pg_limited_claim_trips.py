"""A limited claim on PostgreSQL (DESIGN §16) costs one transaction with the outcomes it
follows, keeps the worker's look-ahead, and reads no more candidates of a limited type than
the type has room for (no second round to claim past it); what it claims is unchanged.
Speed is measured in benchmarks/limits.py (`--old-limited`)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from typing import Any

import psycopg
from jobcore_postgres.storage import PostgresStorage
from pg_testing import new_job
from test_pg_query_plans import Plans, nodes, scans

from jobcore.models import Completed, Lease

Factory = Callable[..., PostgresStorage]


def _events(storage: PostgresStorage, ids: list[str]) -> list[tuple[str, str, str]]:
    with psycopg.connect(storage.target.conninfo, autocommit=True) as conn:
        rows = conn.execute(
            f"SELECT kind, job_id, xid::text FROM {storage.schema}.events "
            "WHERE job_id = ANY(%s) ORDER BY seq",
            (ids,),
        ).fetchall()
    return [(str(k), str(j), str(x)) for k, j, x in rows]


def test_outcomes_and_the_limited_claim_commit_together(pg_storage_factory: Factory) -> None:
    storage = pg_storage_factory()
    storage.set_limit("type", "noop", 1)
    storage.insert([new_job(priority=1), new_job()])
    [first] = storage.claim(worker="w", limit=5, lease_ms=60_000)
    assert storage.claim(worker="w", limit=5, lease_ms=60_000) == []  # at its limit
    # the outcome frees the slot the claim in the same commit takes
    recorded, [second] = storage.commit_batch(
        [Completed(Lease.of(first), None)], worker="w", claim_limit=5, lease_ms=60_000
    )
    assert len(recorded) == 1 and second.id != first.id
    events = _events(storage, [first.id, second.id])
    done = [x for kind, job, x in events if job == first.id and kind == "job:completed"]
    taken = [x for kind, job, x in events if job == second.id and kind == "job:claimed"]
    assert done and done == taken, events  # one transaction: the same transaction id


def test_a_limited_claim_reads_ahead_when_asked(pg_storage_factory: Factory) -> None:
    storage = pg_storage_factory()
    storage.set_limit("type", "noop", 5)
    later = storage.now() + 3_600_000
    storage.insert([new_job(), new_job(run_at=later)])
    _, claimed = storage.commit_batch(
        [], worker="w", claim_limit=5, lease_ms=60_000, look_ahead=True
    )
    assert len(claimed) == 1
    seen = storage.scheduled_seen()
    assert seen is not None and seen[0] == later  # no `next_due()` trip needed after it


def test_a_limited_type_gives_candidates_up_to_its_room(pg_storage_factory: Factory) -> None:
    storage = pg_storage_factory(pool_min=1, pool_max=1)
    storage.set_limit("type", "noop", 3)
    storage.insert([new_job(priority=5) for _ in range(20)])
    storage.insert([new_job("free", priority=0) for _ in range(4)])
    held = storage.claim(worker="w", limit=1, lease_ms=60_000)
    assert [job.type for job in held] == ["noop"]
    plans = Plans(storage, "force_custom_plan")
    got = storage.claim(worker="w", limit=10, lease_ms=60_000)
    # the noop jobs first (higher priority) up to the room left, then the other type's
    assert [job.type for job in got] == ["noop"] * 2 + ["free"] * 4
    candidates = plans.of("SELECT c.* FROM", "LATERAL")
    assert len(candidates) == 1  # one round: nothing refused
    rows: list[Any] = [
        n["Actual Rows"]
        for p in candidates
        for n in nodes(p["Plan"])
        if n["Node Type"] == "Limit" and n.get("Parent Relationship") == "Inner"
    ]
    assert rows and max(rows) <= 4, rows  # noop: 2 rows (its room), free: its 4
    # its statements run with generic plans (`_GENERIC_PLANS`), along the claim indexes
    limited = plans.of("SELECT c.* FROM") + plans.of("ANY(") + plans.of("SELECT 'h'")
    kinds = {kind for kind, _, _ in scans(limited, "jobs")}
    assert kinds and kinds <= {"Index Scan", "Index Only Scan"}, scans(limited, "jobs")


def test_the_claimed_rows_are_counted_only_for_queue_and_type_limits(
    pg_storage_factory: Factory,
) -> None:
    storage = pg_storage_factory(pool_min=1, pool_max=1)
    storage.set_limit("key", "noop", 1)  # key limits count their keys' rows on their own
    storage.insert([new_job(limit_key=f"k{i}") for i in range(6)])
    plans = Plans(storage, "force_custom_plan")
    assert len(storage.claim(worker="w", limit=3, lease_ms=60_000)) == 3
    state = plans.of("SELECT 'h', queue, type")
    loops = [
        n.get("Actual Loops", 0)
        for p in state
        for n in nodes(p["Plan"])
        if n.get("Relation Name") == "jobs"
    ]
    assert loops and not any(loops), loops  # a one-time filter: the jobs never read
    storage.set_limit("type", "noop", 10)
    plans.clear()
    assert len(storage.claim(worker="w", limit=3, lease_ms=60_000)) == 3
    counted = [
        n["Actual Rows"]
        for p in plans.of("SELECT 'h', queue, type")
        for n in nodes(p["Plan"])
        if n.get("Relation Name") == "jobs"
    ]
    assert counted == [3], counted  # the claimed rows, read once


def _trips(storage: PostgresStorage, act: Callable[[], Any]) -> tuple[Any, int]:
    """What `act` returned, and how many times it waited for the server on the store's only
    pooled connection (a Flush, or a Sync not followed by one: what makes it answer)."""
    with tempfile.TemporaryFile("w+") as trace:
        with storage._pool.connection() as conn:
            conn.pgconn.trace(trace.fileno())
        try:
            got = act()
        finally:
            with storage._pool.connection() as conn:
                conn.pgconn.untrace()
        trace.seek(0)
        sent = [f[-1] for f in (line.rstrip().split("\t") for line in trace) if f[-3:-2] == ["F"]]
    waits = [m for i, m in enumerate(sent) if m == "Flush" or sent[i + 1 : i + 2] != ["Flush"]]
    return got, len([m for m in waits if m in ("Sync", "Flush")])


def test_a_limited_claim_that_cannot_refuse_is_two_trips(pg_storage_factory: Factory) -> None:
    # the outcomes, the lock and the limits' state; then the candidates claimed in one
    # statement with the COMMIT (no candidates read, no claim by id in trips of their own)
    storage = pg_storage_factory(pool_min=1, pool_max=1)
    storage.set_limit("type", "noop", 3)
    storage.insert([new_job(priority=5) for _ in range(6)])
    storage.insert([new_job("free") for _ in range(2)])
    [held] = storage.claim(worker="w", limit=1, lease_ms=60_000)
    (recorded, claimed), trips = _trips(
        storage,
        lambda: storage.commit_batch(
            [Completed(Lease.of(held), None)], worker="w", claim_limit=10, lease_ms=60_000
        ),
    )
    assert len(recorded) == 1
    # the freed slot and the two left: three noop jobs (first: higher priority), the rest free
    assert [job.type for job in claimed] == ["noop"] * 3 + ["free"] * 2
    assert all(job.status == "claimed" and job.locked_by == "w" for job in claimed)
    assert trips == 2


def test_a_limited_claim_that_could_refuse_claims_in_rounds(pg_storage_factory: Factory) -> None:
    # a queue limit beside a type limit: the read bounds the type's room only, so the
    # candidates are checked against both before they are claimed by id
    storage = pg_storage_factory(pool_min=1, pool_max=1)
    storage.set_limit("type", "noop", 5)
    storage.set_limit("queue", "default", 2)
    storage.insert([new_job() for _ in range(6)])
    claimed, trips = _trips(storage, lambda: storage.claim(worker="w", limit=10, lease_ms=60_000))
    assert len(claimed) == 2
    assert trips > 2
