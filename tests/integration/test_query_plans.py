"""The hot statements use their partial indexes, so their cost does not grow with old rows.

Timing belongs in benchmarks/; this checks the reason the timing stays flat:
SQLite's own query plan, with and without ANALYZE statistics.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jobcore.models import Completed
from jobcore.storage.sqlite import Q, SQLiteStorage
from jobcore.testing.contract import LEASE, T0, lease_of, new_job


def plan(storage: SQLiteStorage, sql: str, params: dict[str, object]) -> str:
    rows = storage._conn().execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
    return " | ".join(str(row[-1]) for row in rows)


@pytest.fixture(params=[False, True], ids=["fresh", "analyzed"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> SQLiteStorage:
    storage = SQLiteStorage(tmp_path / "plans.db")
    storage.migrate()
    # many finished rows, some scheduled ones, a few pending
    storage.insert([new_job() for _ in range(300)], T0)
    claimed = storage.claim(worker="w", limit=300, now=T0, lease_ms=LEASE)
    storage.record([Completed(lease=lease_of(job, "w"), result=None) for job in claimed], now=T0)
    storage.insert([new_job(run_at=T0 + 10_000, priority=9) for _ in range(100)], T0)
    storage.insert([new_job() for _ in range(5)], T0)
    if request.param:
        storage._conn().execute("ANALYZE")
    return storage


def test_claim_scans_only_the_pending_index(storage: SQLiteStorage) -> None:
    params = {"worker": "w", "limit": 10, "now": T0, "lease_ms": 1, "q0": "default", "t0": "noop"}
    for filters in ("", " AND queue IN (:q0) AND type IN (:t0)"):
        text = plan(storage, Q["claim"].replace("{filters}", filters), params)
        assert "COVERING INDEX jobs_claim" in text, text
        assert "TEMP B-TREE" not in text, text


def test_promotion_sweep_and_stuck_use_their_indexes(storage: SQLiteStorage) -> None:
    assert "INDEX jobs_scheduled (run_at<?)" in plan(storage, Q["promote_due"], {"now": T0})
    assert "INDEX jobs_scheduled" in plan(storage, Q["next_due"], {})
    for name in ("sweep_reclaim", "sweep_fail", "sweep_cancel", "stats_stuck"):
        assert "INDEX jobs_leases (lease_expires_at<?)" in plan(
            storage, Q[name], {"now": T0, "error": ""}
        )


def test_idempotency_lookup_uses_its_index(storage: SQLiteStorage) -> None:
    text = plan(storage, Q["find_unfinished_by_key"], {"type": "noop", "key": "k"})
    assert "INDEX jobs_idempotency" in text
