"""Connections that first open a new database file at the same moment (a hub and a worker
started together, two workers) all open at once, and the file ends in WAL mode."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import apsw
import pytest

from jobcore.errors import StorageBusy
from jobcore.storage.rows import rows_of
from jobcore.storage.sqlite import SQLiteStorage
from jobcore.storage.sqlite_connect import open_connection

BUSY_TIMEOUT = 3.0
"""Long enough for any real wait here."""


def _open_together(path: Path, count: int) -> list[float | BaseException]:
    """`count` threads open `path` at once; each one's seconds, or what it raised."""
    start = threading.Barrier(count)
    results: list[float | BaseException] = [0.0] * count

    def one(index: int) -> None:
        start.wait()
        began = time.monotonic()
        try:
            storage = SQLiteStorage(path, busy_timeout=BUSY_TIMEOUT)
            try:
                storage.count_by_status()  # opens, switches to WAL, migrates
            finally:
                storage.close()
            results[index] = time.monotonic() - began
        except BaseException as exc:  # reported by the test, not lost in the thread
            results[index] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_two_connections_opening_a_new_file_at_once_both_open_quickly(tmp_path: Path) -> None:
    # The loser of the switch to WAL used to fail at once with StorageBusy (about one race
    # in 15 here): SQLite answers a reader that wants the write lock "busy" without waiting.
    slow = []
    for attempt in range(60):
        path = tmp_path / f"jobs-{attempt}.db"
        results = _open_together(path, 2)
        if any(isinstance(r, BaseException) or r > BUSY_TIMEOUT / 2 for r in results):
            slow.append((attempt, results))
        conn = apsw.Connection(str(path))
        assert rows_of(conn, "PRAGMA journal_mode")[0][0] == "wal"
        conn.close()
    assert slow == []


def test_three_connections_opening_a_new_file_at_once(tmp_path: Path) -> None:
    for attempt in range(20):
        results = _open_together(tmp_path / f"jobs-{attempt}.db", 3)
        assert all(isinstance(r, float) and r < BUSY_TIMEOUT / 2 for r in results), results


def test_a_file_locked_in_rollback_mode_is_waited_for_then_switched(tmp_path: Path) -> None:
    path = str(tmp_path / "jobs.db")
    holder = apsw.Connection(path)  # rollback journal: its write lock blocks the switch
    holder.execute("BEGIN EXCLUSIVE; CREATE TABLE outside(x); ")
    releaser = threading.Timer(0.3, lambda: holder.execute("COMMIT"))
    releaser.start()
    began = time.monotonic()
    conn = open_connection(path, "FULL", 5000)
    waited = time.monotonic() - began
    releaser.join()
    assert 0.2 < waited < 4.0
    assert rows_of(conn, "PRAGMA journal_mode")[0][0] == "wal"
    assert rows_of(conn, "SELECT name FROM sqlite_master")[0][0] == "outside"
    conn.close()
    holder.close()


def test_a_file_locked_for_longer_than_the_busy_timeout_is_storage_busy(tmp_path: Path) -> None:
    path = str(tmp_path / "jobs.db")
    holder = apsw.Connection(path)
    holder.execute("BEGIN EXCLUSIVE; CREATE TABLE outside(x); ")
    try:
        began = time.monotonic()
        with pytest.raises(StorageBusy, match="busy_timeout"):
            open_connection(path, "FULL", 200)
        assert time.monotonic() - began < 2.0  # the timeout is kept, not retried past
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert rows_of(apsw.Connection(path), "PRAGMA journal_mode")[0][0] == "delete"
