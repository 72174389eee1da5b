"""The hot statements use their partial indexes, so their cost does not grow with old rows.

Timing belongs in benchmarks/; this checks the reason the timing stays flat:
SQLite's own query plan, with and without ANALYZE statistics, and the number
of rows a statement reads (SQLite's virtual-machine step counter).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apsw
import pytest

from jobcore.models import Completed
from jobcore.storage import sqlite_statements as S
from jobcore.storage.sqlite import (
    PROMOTE_SQL,
    SWEEP_SQL,
    Q,
    SQLiteStorage,
)
from jobcore.testing.contract import LEASE, T0, FakeClock, lease_of, new_job


def plan(storage: SQLiteStorage, sql: str, params: dict[str, object]) -> str:
    rows = storage._conn().execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
    return " | ".join(str(row[-1]) for row in rows)


@pytest.fixture(params=[False, True], ids=["fresh", "analyzed"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> SQLiteStorage:
    storage = SQLiteStorage(tmp_path / "plans.db", clock=FakeClock())
    storage.migrate()
    # many finished rows, some scheduled ones, a few pending
    storage.insert([new_job() for _ in range(300)])
    claimed = storage.claim(worker="w", limit=300, lease_ms=LEASE)
    storage.record([Completed(lease_of(job), None) for job in claimed])
    storage.insert([new_job(run_at=T0 + 10_000, priority=9) for _ in range(100)])
    storage.insert([new_job() for _ in range(5)])
    if request.param:
        storage._conn().execute("ANALYZE")
    return storage


def claim_plans(storage: SQLiteStorage, queues: list[str], types: list[str]) -> list[str]:
    params: dict[str, Any] = {
        "worker": "w",
        "limit": 10,
        "now": T0,
        "lease_ms": 1,
        "started_at": T0,
    }
    return [plan(storage, sql, params) for sql in S.claim(queues, types, params)]


def test_claim_scans_only_the_pending_index(storage: SQLiteStorage) -> None:
    [text] = claim_plans(storage, [], [])
    assert "SCAN jobs USING COVERING INDEX jobs_claim" in text.split(" | "), text
    assert "TEMP B-TREE" not in text, text


@pytest.mark.parametrize(
    ("queues", "types", "index"),
    [
        (["b"], [], "jobs_claim_queue (queue=?)"),
        (["b"], ["noop", "x"], "jobs_claim_queue (queue=?)"),
        ([], ["noop"], "jobs_claim_type (type=?)"),
    ],
)
def test_a_claim_on_one_queue_or_type_reads_its_own_index_in_order(
    storage: SQLiteStorage, queues: list[str], types: list[str], index: str
) -> None:
    [text] = claim_plans(storage, queues, types)
    assert f"COVERING INDEX {index}" in text, text
    assert "INDEX jobs_claim" not in text.replace("jobs_claim_", ""), text
    assert "TEMP B-TREE" not in text, text


@pytest.mark.parametrize(
    ("queues", "types", "index"),
    [
        (["a", "b"], ["noop"], "jobs_claim_queue (queue=?)"),
        ([], ["noop", "x", "y"], "jobs_claim_type (type=?)"),
    ],
)
def test_a_claim_on_several_reads_a_bounded_window_then_each_ones_rows(
    storage: SQLiteStorage, queues: list[str], types: list[str], index: str
) -> None:
    window, each = claim_plans(storage, queues, types)
    assert "SCAN jobs USING COVERING INDEX jobs_claim" in window, window  # LIMIT 4 * limit + 64
    assert "TEMP B-TREE" not in window.split("CO-ROUTINE")[1], window
    assert f"COVERING INDEX {index}" in each, each
    assert "INDEX jobs_claim" not in each.replace("jobs_claim_", ""), each


def test_a_claim_on_one_queue_does_not_read_another_queues_rows(tmp_path: Path) -> None:
    """100k pending higher-priority jobs in queue A: a claim on queue B reads about nothing."""
    storage = SQLiteStorage(tmp_path / "queues.db", clock=FakeClock(), synchronous="OFF")
    storage.migrate()
    conn = storage._conn()
    with storage.transaction():
        conn.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000) "
            "INSERT INTO jobs (id, type, queue, payload, status, priority, max_attempts, run_at, "
            "created_at, updated_at) "
            "SELECT printf('a%08d', i), 'noop', 'a', '{}', 'pending', 5, 3, ?1, ?1, ?1 FROM n",
            (T0,),
        )
    storage.insert([new_job(queue="b"), new_job("other", queue="b")])

    def steps(queues: list[str], types: list[str]) -> int:
        counted = [0]

        def tick() -> int:
            counted[0] += 1
            return 0

        conn.set_progress_handler(tick, 100)  # called every 100 VM instructions
        try:
            with storage.transaction():
                jobs = storage.claim(
                    worker="w", limit=1, lease_ms=LEASE, queues=queues, types=types
                )
                assert [j.queue for j in jobs] == ["b"]
                raise apsw.AbortError("roll back: measure only")
        except apsw.AbortError:
            pass
        finally:
            conn.set_progress_handler(None)
        return counted[0]

    assert steps(["b"], []) < 50
    assert steps(["b"], ["noop"]) < 50
    assert steps([], ["other"]) < 50
    assert steps(["b", "c"], []) < 100  # the first phase reads a window of 68 rows at most
    assert steps([], ["other", "x"]) < 100
    storage.close()


def test_promotion_sweep_and_stuck_use_their_indexes(storage: SQLiteStorage) -> None:
    assert "INDEX jobs_scheduled (run_at<?)" in plan(storage, PROMOTE_SQL, {"now": T0})
    assert "INDEX jobs_scheduled" in plan(storage, Q["next_due"], {})
    for sql, _error, _action in SWEEP_SQL:
        assert "INDEX jobs_leases (lease_expires_at<?)" in plan(
            storage, sql, {"now": T0, "error": ""}
        )
    assert "INDEX jobs_leases (lease_expires_at<?)" in plan(storage, Q["stats_stuck"], {"now": T0})


def test_promotion_is_bounded_per_claim(tmp_path: Path) -> None:
    clock = FakeClock()
    storage = SQLiteStorage(tmp_path / "promote.db", clock=clock, synchronous="OFF")
    storage.insert([new_job(run_at=T0 + 1) for _ in range(S.PROMOTE_BATCH + 500)])
    clock.now = T0 + 1
    [first] = storage.claim(worker="w", limit=1, lease_ms=LEASE)
    counts = storage.count_by_status()
    assert counts == {"claimed": 1, "pending": S.PROMOTE_BATCH - 1, "scheduled": 500}
    assert first.run_at == T0 + 1
    storage.claim(worker="w", limit=1, lease_ms=LEASE)
    assert "scheduled" not in storage.count_by_status()
    storage.close()


def test_idempotency_lookup_uses_its_index(storage: SQLiteStorage) -> None:
    text = plan(storage, Q["find_unfinished_by_key"], {"type": "noop", "key": "k"})
    assert "INDEX jobs_idempotency" in text


def test_event_pruning_reads_only_old_events(storage: SQLiteStorage) -> None:
    text = plan(storage, Q["prune_events"], {"before": T0, "chunk": 10})
    assert "SCAN events" in text and "USING INTEGER PRIMARY KEY" in text, text


def ephemeral_tables(storage: SQLiteStorage, sql: str) -> list[str]:
    """The temporary b-trees a statement's program opens (EXPLAIN's `OpenEphemeral`)."""
    params = {name: None for name in ("id", "lease_id", "worker", "now", "error", "delay_ms")}
    params |= {"result": None, "started_at": None}
    rows = storage._conn().execute("EXPLAIN " + sql, params).fetchall()
    return [str(row) for row in rows if row[1] == "OpenEphemeral"]


@pytest.mark.parametrize("name", sorted(S.OWNER_SQL))
def test_an_outcome_with_the_claim_at_hand_builds_no_temporary_table(
    storage: SQLiteStorage, name: str
) -> None:
    """Neither the status CHECK (a 6-value IN list) nor RETURNING (buffered rows) makes
    SQLite build and drop a temporary b-tree on every owner outcome (a noop job's hot path)."""
    _whole, read, update = S.OWNER_SQL[name]
    assert ephemeral_tables(storage, read) == []
    assert ephemeral_tables(storage, update) == []
    params = {"id": "x", "lease_id": "l", "worker": "w", "now": T0, "started_at": None}
    for sql in (read, update):  # one row by its key, both times
        params |= {"error": None, "delay_ms": 0, "result": None}
        assert (
            plan(storage, sql, params) == "SEARCH jobs USING INDEX sqlite_autoindex_jobs_1 (id=?)"
        )
