"""Schema migrations: a v1 database is upgraded in place; only real work takes the write lock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apsw
import pytest

from jobcore.errors import SchemaTooNew, StorageBusy, StorageError
from jobcore.models import Completed, JobStatus, Lease
from jobcore.storage.migrations import (
    MIGRATIONS,
    SCHEMA_VERSION,
    STATUS_CHECK,
    STATUS_CHECK_MIGRATION,
    V1_STATUS_CHECK,
)
from jobcore.storage.sqlite import SQLiteStorage
from jobcore.testing.contract import LEASE, T0, FakeClock

V1_COLUMNS = (
    "id, type, queue, payload, status, priority, attempts, max_attempts, run_at, locked_by, "
    "locked_at, lease_expires_at, heartbeat_at, errors, created_at, claimed_at, updated_at"
)


def make_v1(path: Path) -> None:
    """A database as jobcore 0.1 left it: schema 1, jobs in every state."""
    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(MIGRATIONS[0][1])
    conn.execute("PRAGMA user_version=1")
    rows: list[tuple[Any, ...]] = [
        ("p1", "noop", "default", "{}", "pending", 0, 0, 3, T0, None, None, None, None, "[]"),
        ("c1", "noop", "default", "{}", "claimed", 0, 1, 3, T0, "old", T0, T0 + LEASE, T0, "[]"),
        (
            "f1",
            "noop",
            "default",
            "{}",
            "failed",
            0,
            3,
            3,
            T0,
            "old",
            None,
            None,
            None,
            '[{"attempt": 3, "error": "boom", "worker": "old", "at": 1}]',
        ),
    ]
    conn.executemany(
        f"INSERT INTO jobs ({V1_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?, {T0}, {T0}, {T0})",
        rows,
    )
    conn.close()


def schema(path: Path) -> list[tuple[str, str]]:
    conn = apsw.Connection(str(path))
    try:
        return sorted(
            (name, " ".join(sql.split()))
            for name, sql in conn.execute(
                "SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%'"
            )
        )
    finally:
        conn.close()


def test_a_v1_database_is_upgraded_in_place(tmp_path: Path) -> None:
    old = tmp_path / "v1.db"
    make_v1(old)
    clock = FakeClock(T0 + LEASE + 1)
    storage = SQLiteStorage(old, clock=clock)
    storage.migrate()
    assert storage.get("p1") is not None
    claimed = storage.get("c1")
    assert claimed is not None
    assert claimed.lease_id and claimed.started_at == T0 and claimed.history == []
    failed = storage.get("f1")
    assert failed is not None and failed.errors[0]["error"] == "boom" and failed.history == []
    # the v1 claim is treated as started: its expired lease is reclaimed with an error entry
    [swept] = storage.sweep(force=True)
    assert (swept.job.id, swept.action) == ("c1", "reclaimed")
    jobs = storage.claim(worker="new", limit=5, lease_ms=LEASE)
    assert {job.id for job in jobs} == {"p1", "c1"}
    [rec] = storage.record([Completed(Lease.of(jobs[0]), "ok")])
    assert rec.job is not None and rec.job.status is JobStatus.COMPLETED
    assert [e.kind for e in storage.events_after(0) if e.job_id == jobs[0].id][-1] == (
        "job:completed"
    )
    storage.close()
    fresh = tmp_path / "fresh.db"
    SQLiteStorage(fresh).migrate()
    assert schema(old) == schema(fresh)
    conn = apsw.Connection(str(old))
    assert conn.execute("PRAGMA user_version").fetchall()[0][0] == SCHEMA_VERSION
    conn.close()


def test_migration_takes_the_write_lock_only_when_there_is_work(tmp_path: Path) -> None:
    current, old = tmp_path / "current.db", tmp_path / "old.db"
    SQLiteStorage(current).migrate()
    make_v1(old)
    for path in (current, old):
        writer = apsw.Connection(str(path))
        writer.execute("BEGIN IMMEDIATE")
        try:
            storage = SQLiteStorage(path, busy_timeout=0.05)
            if path == current:
                storage.migrate()  # nothing to do: a read
                assert storage.count_by_status() == {}
            else:
                with pytest.raises(StorageBusy, match="busy"):
                    storage.migrate()
            storage.close()
        finally:
            writer.execute("ROLLBACK")
            writer.close()
    upgraded = SQLiteStorage(old)  # once the writer is gone the upgrade goes through
    assert upgraded.count_by_status() == {"pending": 1, "claimed": 1, "failed": 1}
    upgraded.close()


def test_a_newer_schema_is_refused_without_writing(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    SQLiteStorage(path).migrate()
    conn = apsw.Connection(str(path))
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    conn.close()
    storage = SQLiteStorage(path)
    with pytest.raises(SchemaTooNew, match="upgrade jobcore"):
        storage.migrate()
    storage.close()
    conn = apsw.Connection(str(path))
    assert conn.execute("PRAGMA user_version").fetchall()[0][0] == SCHEMA_VERSION + 1
    conn.close()


def test_a_failing_migration_leaves_the_database_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    make_v1(path)
    conn = apsw.Connection(str(path))
    conn.execute("CREATE TABLE events (x)")  # an application table in the way of migration 2
    conn.close()
    before = schema(path)
    storage = SQLiteStorage(path)
    with pytest.raises(StorageError, match="events"):
        storage.migrate()
    storage.close()
    assert schema(path) == before  # no half-added columns, still schema 1
    conn = apsw.Connection(str(path))
    assert conn.execute("PRAGMA user_version").fetchall()[0][0] == 1
    assert conn.execute("SELECT count(*) FROM jobs").fetchall()[0][0] == 3
    conn.close()


def test_a_worker_waits_out_a_busy_database_at_start(tmp_path: Path) -> None:
    """Migration work behind another writer is transient: the worker backs off, then runs."""
    import threading

    from jobcore.testing import make_queue
    from jobcore.worker import Worker

    path = tmp_path / "v1.db"
    make_v1(path)
    holder = apsw.Connection(str(path))
    holder.execute("BEGIN IMMEDIATE")
    queue = make_queue(path, busy_timeout=0.05)
    worker = Worker(queue, until_empty=True, lease=60)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        thread.join(0.5)
        assert thread.is_alive()  # still trying, not crashed
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    thread.join(30)
    assert not thread.is_alive() and worker.exit_code == 0
    counts = queue.storage.count_by_status()
    assert counts.get("pending", 0) == 0 and counts.get("claimed", 0) == 1  # c1's lease is live
    queue.close()


def test_processes_opening_an_old_database_at_once_migrate_it_once(tmp_path: Path) -> None:
    import threading

    path = tmp_path / "v1.db"
    make_v1(path)
    handles = [SQLiteStorage(path) for _ in range(5)]
    barrier = threading.Barrier(len(handles))
    errors: list[BaseException] = []

    def open_it(storage: SQLiteStorage) -> None:
        barrier.wait()
        try:
            storage.migrate()
            storage.count_by_status()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_it, args=(h,)) for h in handles]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert handles[0].count_by_status() == {"pending": 1, "claimed": 1, "failed": 1}
    for handle in handles:
        handle.close()


def test_the_status_check_is_rewritten_in_place_with_the_same_rule(tmp_path: Path) -> None:
    """A database one version before STATUS_CHECK_MIGRATION: its CHECK is rewritten (no
    table copy); bad statuses are still refused, other connections are told to reload the
    schema, and the file stays sound."""
    before = STATUS_CHECK_MIGRATION - 1
    path = tmp_path / "before.db"
    make_v1(path)
    conn = apsw.Connection(str(path))
    for _, script in MIGRATIONS[1:before]:
        conn.execute(script)
    conn.execute(f"PRAGMA user_version={before}")
    cookie = conn.execute("PRAGMA schema_version").fetchall()[0][0]
    storage = SQLiteStorage(path)
    storage.migrate()
    assert storage.count_by_status() == {"pending": 1, "claimed": 1, "failed": 1}
    storage.close()
    [(table,)] = conn.execute("SELECT sql FROM sqlite_schema WHERE name = 'jobs'").fetchall()
    assert STATUS_CHECK in table and V1_STATUS_CHECK not in table
    assert conn.execute("PRAGMA schema_version").fetchall()[0][0] > cookie
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    assert not conn.execute(
        "SELECT 1 FROM sqlite_schema WHERE name = 'jobcore_schema_reload'"
    ).fetchall()
    # the connection opened before the upgrade: the same rule, every status and no other
    conn.execute("BEGIN")
    for status in ("scheduled", "pending", "claimed", "completed", "failed", "cancelled"):
        conn.execute("UPDATE jobs SET status = ? WHERE id = 'p1'", (status,))
    for bad in ("bogus", "Pending", "", None):
        with pytest.raises(apsw.ConstraintError):
            conn.execute("UPDATE jobs SET status = ? WHERE id = 'p1'", (bad,))
    # the key index keeps one unfinished job per (type, key), and only unfinished ones
    key = "INSERT INTO jobs (id, type, payload, status, max_attempts, run_at, idempotency_key,"
    key += " created_at, updated_at) VALUES (?, 'noop', '{}', ?, 1, 0, 'k', 0, 0)"
    conn.execute(key, ("k1", "completed"))
    conn.execute(key, ("k2", "scheduled"))
    for status in ("pending", "scheduled", "claimed"):
        with pytest.raises(apsw.ConstraintError):
            conn.execute(key, ("k3", status))
    conn.execute("ROLLBACK")
    conn.close()
