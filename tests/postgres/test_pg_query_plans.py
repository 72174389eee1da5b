"""The hot statements keep their index plans whatever the table statistics say.

This server may run without autovacuum (or behind a busy table), so plans
must not depend on `ANALYZE`: a table full of finished and dead rows is
planned with no statistics, with statistics taken while it was nearly empty,
and with fresh ones, each time with the prepared (generic) plans a long-lived
connection ends up with and with per-call (custom) plans. The plans checked
are the ones the store itself runs: `auto_explain` on the store's only pooled
connection (its own session settings) reports every statement it executes.
Timing belongs in benchmarks/pg_scale.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from jobcore_postgres.storage import PostgresStorage
from pg_testing import new_job

from jobcore.models import (
    Cancelled,
    Completed,
    Failed,
    Job,
    JobStatus,
    Lease,
    Released,
    Retrying,
)

Factory = Callable[..., PostgresStorage]
FINISHED = 20_000  # completed rows, half of them older than the prune cutoff
NOT_DUE = 5000  # scheduled tomorrow, higher priority than anything pending


class Plans:
    """The plans of every statement the store's pooled connection executes (auto_explain)."""

    def __init__(self, storage: PostgresStorage, plan_cache_mode: str) -> None:
        self.seen: list[dict[str, Any]] = []  # since the last `clear`
        self.everything: list[dict[str, Any]] = []
        with storage._pool.connection() as conn:
            conn.execute("LOAD 'auto_explain'")
            for name, value in (
                ("auto_explain.log_min_duration", "0"),
                ("auto_explain.log_format", "json"),
                ("auto_explain.log_analyze", "on"),
                ("auto_explain.log_timing", "off"),
                ("auto_explain.log_level", "notice"),
                ("plan_cache_mode", plan_cache_mode),
            ):
                conn.execute(f"SET {name} = '{value}'")
            conn.add_notice_handler(self._notice)

    def _notice(self, diag: psycopg.errors.Diagnostic) -> None:
        text = diag.message_primary or ""
        if text.startswith("duration:") and "plan:" in text:
            plan = json.loads(text.split("plan:", 1)[1])
            self.seen.append(plan)
            self.everything.append(plan)

    def clear(self) -> None:
        self.seen.clear()

    def of(self, *fragments: str) -> list[dict[str, Any]]:
        """Plans (since the last `clear`) of the statements containing every fragment."""
        found = [p for p in self.seen if all(f in p["Query Text"] for f in fragments)]
        assert found, f"no statement with {fragments} ran"
        return found


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def scans(found: list[dict[str, Any]], table: str) -> list[tuple[str, str | None, int]]:
    """(node type, index, rows removed by filter) of every scan of `table` in the plans."""
    return [
        (n["Node Type"], n.get("Index Name"), n.get("Rows Removed by Filter", 0))
        for p in found
        for n in nodes(p["Plan"])
        if n.get("Relation Name") == table and "Scan" in n["Node Type"]
    ]


def walks(found: list[dict[str, Any]], table: str, index: str, also: tuple[str, ...] = ()) -> int:
    """The plans find `table`'s rows along `index` (and look rows up by primary key or the
    indexes `also`, nothing else); answers the rows read in `index` that its filters removed."""
    seen = scans(found, table)
    assert index in {name for _, name, _ in seen}, seen
    for kind, name, _ in seen:
        assert kind in ("Index Scan", "Index Only Scan"), seen
        assert name in (index, f"{table}_pkey", *also), seen
    return sum(removed for _, name, removed in seen if name == index)


def _sql(storage: PostgresStorage, statement: str, params: dict[str, Any] | None = None) -> None:
    """A statement on a connection of its own (not the store's: no plan is recorded)."""
    with psycopg.connect(storage.target.conninfo, autocommit=True) as conn:
        conn.execute(statement.format(s=storage.schema), params)


def bloat(storage: PostgresStorage) -> int:
    """Finished rows, not-due rows, old events and dead row versions; answers a prune cutoff."""
    now = storage.now()
    _sql(
        storage,
        "INSERT INTO {s}.jobs (id, type, queue, payload, status, attempts, max_attempts, run_at, "
        "created_at, updated_at, completed_at) SELECT 'done' || g, 'noop', 'default', '{{}}', "
        "'completed', 1, 3, %(now)s - %(n)s + g, %(now)s, %(now)s, %(now)s - %(n)s + g "
        "FROM generate_series(1, %(n)s) g",
        {"now": now, "n": FINISHED},
    )
    _sql(
        storage,
        "INSERT INTO {s}.jobs (id, type, queue, payload, status, priority, max_attempts, run_at, "
        "created_at, updated_at) SELECT 'later' || g, 'noop', 'default', '{{}}', 'scheduled', "
        "10, 3, %(now)s + 86400000 + g, %(now)s, %(now)s FROM generate_series(1, %(n)s) g",
        {"now": now, "n": NOT_DUE},
    )
    _sql(  # a few events older than the retention, many newer
        storage,
        "INSERT INTO {s}.events (at, kind) SELECT %(now)s - CASE WHEN g <= 10 THEN 7200000 "
        "ELSE 0 END, 'bench' FROM generate_series(1, 20000) g",
        {"now": now},
    )
    for _ in range(3):  # dead versions in the claim indexes, from the store's own transitions
        storage.insert([new_job(queue=f"q{i % 3}") for i in range(1000)])
        jobs = storage.claim(worker="churn", limit=1000, lease_ms=60_000)
        storage.record([Completed(Lease.of(job), None) for job in jobs])
    return now - FINISHED // 2 + 1  # the older half of them


def analyze(storage: PostgresStorage) -> None:
    _sql(storage, "ANALYZE {s}.jobs, {s}.events")


@pytest.fixture(params=["force_custom_plan", "force_generic_plan"], ids=["custom", "generic"])
def plan_cache_mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.parametrize("statistics", ["none", "before bloat", "after bloat"])
def test_the_stores_statements_walk_their_indexes_with_any_statistics(
    pg_storage_factory: Factory, plan_cache_mode: str, statistics: str
) -> None:
    storage = pg_storage_factory(pool_min=1, pool_max=1, event_retention_ms=3_600_000)
    if statistics == "before bloat":
        storage.insert([new_job() for _ in range(20)])
        analyze(storage)
    cutoff = bloat(storage)
    if statistics == "after bloat":
        analyze(storage)
    # what the claims below find: due scheduled jobs, pending jobs in two queues and types
    storage.insert([new_job(run_at=storage.now() - 1000) for _ in range(3)])
    storage.insert([new_job(queue="busy") for _ in range(30)])
    storage.insert([new_job("rare", queue="busy") for _ in range(10)])
    storage.insert([new_job("rare", queue="quiet") for _ in range(5)])
    _sql(  # the not-due rows become due in the past: promotion has work, bounded by its limit
        storage, "UPDATE {s}.jobs SET run_at = 1 WHERE id IN ('later1', 'later2')"
    )
    plans = Plans(storage, plan_cache_mode)
    jobcore = storage.schema

    # claims: each variant walks its own pending-only index in claim order
    def claim(**filters: Any) -> list[Job]:
        return storage.claim(worker="w", limit=4, lease_ms=60_000, **filters)

    plain = claim()
    by_queue = claim(queues=["quiet"])
    by_type = claim(types=["rare"])
    both = claim(queues=["busy"], types=["rare"])
    assert {j.queue for j in by_queue} == {"quiet"} and {j.type for j in both} == {"rare"}
    claimed = claim() + claim() + claim()
    assert len(claimed) == 12
    # the branch past paused queues (DESIGN §16) is in the plans, never run while none is
    gated = ("jobs_claim_queue",)
    walks(plans.of("p.attempts >= 0 ORDER BY"), "jobs", "jobs_claim", also=gated)
    queue_led = [p for p in plans.of("p.queue = f.name") if "RECURSIVE" not in p["Query Text"]]
    with_type = [p for p in queue_led if "p.type = ANY" in p["Query Text"]]
    assert walks(with_type, "jobs", "jobs_claim_queue") <= 30
    alone = [p for p in queue_led if "p.type = ANY" not in p["Query Text"]]
    assert walks(alone, "jobs", "jobs_claim_queue") == 0  # no other queue's rows
    assert walks(plans.of("p.type = f.name"), "jobs", "jobs_claim_type", also=gated) == 0
    # with a queue paused, claims walk the other queues by name: no paused row is read
    storage.pause("queue", "busy", reason="", by="test")
    storage.insert([new_job(queue="busy", priority=5) for _ in range(40)])
    plans.clear()
    assert "busy" not in {j.queue for j in claim() + claim(types=["noop", "rare"])}
    walks(plans.of("p.attempts >= 0 ORDER BY"), "jobs", "jobs_claim_queue", also=("jobs_claim",))
    removed = [
        (n["Node Type"], n.get("Index Name"), n.get("Filter"), n["Rows Removed by Filter"])
        for p in plans.of("RECURSIVE")
        for n in nodes(p["Plan"])
        if n.get("Rows Removed by Filter")
    ]
    assert sum(row[-1] for row in removed) <= 200, removed  # other types' rows at queue heads
    storage.resume("queue", "busy")
    promote = plans.of(f"UPDATE {jobcore}.jobs j SET status = 'pending'", "'scheduled'")
    assert walks(promote, "jobs", "jobs_scheduled") == 0
    promoted = storage.get("later1")
    assert promoted is not None and promoted.status is not JobStatus.SCHEDULED

    # owner transitions: each reported job found by primary key
    plans.clear()
    storage.mark_started([Lease.of(j) for j in plain + by_queue])
    assert storage.extend_leases([Lease.of(j) for j in by_type], lease_ms=60_000)
    outcomes = [Completed(Lease.of(plain[0]), {"ok": True}), Failed(Lease.of(plain[1]), "no")]
    outcomes += [Retrying(Lease.of(plain[2]), "again"), Retrying(Lease.of(plain[3]), "", 5000)]
    outcomes += [Released(Lease.of(by_queue[0])), Cancelled(Lease.of(by_queue[1]))]
    storage.record(outcomes)
    for kind in ("started_at = coalesce", "heartbeat_at =", "'completed'", "'failed'"):
        walks(plans.of("AS v(id, lease_id", kind), "jobs", "jobs_pkey")
    walks(plans.of("AS v(id, lease_id"), "jobs", "jobs_pkey")  # retry, release, cancel too
    # outcomes of several kinds lock their rows first, and a heartbeat its rows, in the
    # order reported (job id order): a loop over the reports locking one row per report
    for found in plans.of("LATERAL (SELECT j.id FROM"):
        [loop] = [n for n in nodes(found["Plan"]) if n["Node Type"] == "Nested Loop"]
        outer, inner = loop["Plans"]
        assert outer["Node Type"] == "Function Scan", loop
        assert [n["Node Type"] for n in nodes(inner)][:2] in (
            ["Subquery Scan", "LockRows"],
            ["LockRows", "Index Scan"],
        ), loop
    assert len(plans.of("LATERAL (SELECT j.id FROM")) == 3  # mark started, extend, record

    # the sweep: expired leases by expiry, old events in delivery order (one batch at most)
    storage.claim(worker="gone", limit=5, lease_ms=1)
    time.sleep(0.05)
    plans.clear()
    assert storage.sweep(force=True)
    assert walks(plans.of("ORDER BY j.lease_expires_at"), "jobs", "jobs_leases") < 50
    pruned = plans.of(f"DELETE FROM {jobcore}.events")
    assert walks(pruned, "events", "events_delivery") == 0

    # prune: finished rows older than the cutoff, along the finished index only
    plans.clear()
    assert storage.prune(before=cutoff) == FINISHED // 2
    assert walks(plans.of(f"DELETE FROM {jobcore}.jobs"), "jobs", "jobs_finished") == 0
    plans.clear()
    storage.prune(before=cutoff, statuses=["completed"], types=["noop"])
    walks(plans.of(f"DELETE FROM {jobcore}.jobs"), "jobs", "jobs_finished")

    # events: a batch's one row, resumed inside it, then the next rows (delivery index)
    plans.clear()
    batch = [item.job.id for item in storage.insert([new_job() for _ in range(5)])]
    newest = storage.last_event_seq()
    assert [e.job_id for e in storage.events_after(newest - 3)] == batch[-3:]
    assert len(storage.events_after(0, 3)) == 3
    walks(plans.of("WITH holder AS"), "events", "events_delivery", also=("events_pkey",))
    walks(plans.of("WITH holder AS"), "jobs", "jobs_pkey")

    for plan in plans.everything:  # nothing else the store ran read a table from end to end
        kinds = {kind for kind, _, _ in scans([plan], "jobs") + scans([plan], "events")}
        assert not kinds & {"Seq Scan", "Bitmap Heap Scan"}, plan["Query Text"]
