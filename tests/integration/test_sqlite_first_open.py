"""Connections that first open a new database file at the same moment (a hub and a worker
started together, two workers) all open at once, and the file ends in WAL mode."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import apsw
import pytest
from together import at_once

from jobcore.errors import StorageBusy, StorageError
from jobcore.storage.rows import rows_of
from jobcore.storage.sqlite import SQLiteStorage
from jobcore.storage.sqlite_connect import open_connection

BUSY_TIMEOUT = 3.0
"""Long enough for any real wait here."""


def _open_together(path: Path, count: int) -> list[float | BaseException]:
    """`count` threads open `path` at once; each one's seconds, or what it raised."""

    def one() -> float:
        began = time.monotonic()
        storage = SQLiteStorage(path, busy_timeout=BUSY_TIMEOUT)
        try:
            storage.count_by_status()  # opens, switches to WAL, migrates
        finally:
            storage.close()
        return time.monotonic() - began

    return at_once(count, one)


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


def _hold(path: str, lock: str, seconds: float) -> threading.Thread:
    """A thread of another program holding `BEGIN <lock>` on `path` (rollback journal) for
    `seconds`; started once it holds the lock."""
    held = threading.Event()

    def hold() -> None:
        conn = apsw.Connection(path)
        conn.execute(f"BEGIN {lock}; INSERT INTO outside VALUES (1)")
        held.set()
        time.sleep(seconds)
        conn.execute("COMMIT")
        conn.close()

    thread = threading.Thread(target=hold)
    thread.start()
    held.wait()
    return thread


def _rollback_mode_file(tmp_path: Path) -> str:
    path = str(tmp_path / "app.db")
    conn = apsw.Connection(path)
    conn.execute("CREATE TABLE outside(x)")
    conn.close()
    return path


@pytest.mark.parametrize("lock", ["EXCLUSIVE", "IMMEDIATE"])
def test_a_file_locked_in_rollback_mode_is_waited_for_then_switched(
    tmp_path: Path, lock: str
) -> None:
    # EXCLUSIVE is waited out before the switch (its read), IMMEDIATE during it: SQLite
    # answers a switch that began with a read "busy" at once, and it is run again
    path = _rollback_mode_file(tmp_path)
    holder = _hold(path, lock, 0.3)
    began = time.monotonic()
    conn = open_connection(path, "FULL", 5000)
    waited = time.monotonic() - began
    holder.join()
    assert 0.2 < waited < 4.0
    assert rows_of(conn, "PRAGMA journal_mode")[0][0] == "wal"
    assert rows_of(conn, "SELECT count(*) FROM outside")[0][0] == 1
    conn.close()


@pytest.mark.parametrize("lock", ["EXCLUSIVE", "IMMEDIATE"])
def test_a_file_locked_for_longer_than_the_busy_timeout_is_storage_busy(
    tmp_path: Path, lock: str
) -> None:
    path = _rollback_mode_file(tmp_path)
    holder = _hold(path, lock, 2.0)
    began = time.monotonic()
    with pytest.raises(StorageBusy, match="busy_timeout"):
        open_connection(path, "FULL", 300)
    assert time.monotonic() - began < 1.5  # the timeout is kept, not retried past
    holder.join()
    conn = apsw.Connection(path)
    assert rows_of(conn, "PRAGMA journal_mode")[0][0] == "delete"
    conn.close()


def test_the_busy_timeout_bounds_the_whole_open_not_each_step(tmp_path: Path) -> None:
    # a write lock held past the read before the switch, then another one during it: both
    # waits come out of one busy timeout (each step used to get the whole of it)
    path = _rollback_mode_file(tmp_path)
    held = threading.Event()

    def hold() -> None:
        conn = apsw.Connection(path)
        conn.execute("BEGIN EXCLUSIVE")
        held.set()
        time.sleep(0.6)
        conn.execute("COMMIT; BEGIN IMMEDIATE; INSERT INTO outside VALUES (1)")
        time.sleep(2.0)
        conn.execute("COMMIT")
        conn.close()

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait()
    began = time.monotonic()
    with pytest.raises(StorageBusy):
        open_connection(path, "FULL", 1000)
    assert time.monotonic() - began < 1.5
    holder.join()


def test_readers_always_reading_do_not_keep_the_switch_out(tmp_path: Path) -> None:
    # another program's readers in rollback mode, one read always open: the switch waits
    # for the write lock inside SQLite, which lets no new reader in meanwhile
    path = _rollback_mode_file(tmp_path)
    stop = threading.Event()
    failures: list[BaseException] = []

    def read(offset: float) -> None:
        conn = apsw.Connection(path)
        conn.set_busy_timeout(10_000)
        time.sleep(offset)
        while not stop.is_set():
            try:
                conn.execute("BEGIN; SELECT * FROM outside")
                time.sleep(0.06)
                conn.execute("COMMIT")
            except apsw.BusyError:
                continue
            except BaseException as exc:
                failures.append(exc)
                break
        conn.close()

    readers = [threading.Thread(target=read, args=(offset,)) for offset in (0, 0.03)]
    for reader in readers:
        reader.start()
    try:
        time.sleep(0.2)
        conn = open_connection(path, "FULL", 5000)
    finally:
        stop.set()
        for reader in readers:
            reader.join()
    assert rows_of(conn, "PRAGMA journal_mode")[0][0] == "wal"
    conn.close()
    assert failures == []


def test_a_connection_that_fails_to_open_is_closed(tmp_path: Path) -> None:
    # closed at once, not when the error's traceback (which holds it) is let go: a caller
    # keeping the errors it met kept one open file per try
    path = tmp_path / "not-a-db"
    path.write_bytes(b"this is not a database file, just text" * 100)
    before = len(os.listdir("/proc/self/fd"))
    kept = []
    for _ in range(20):
        with pytest.raises(StorageError) as caught:
            open_connection(str(path), "FULL", 100)
        kept.append(caught.value)
    assert len(os.listdir("/proc/self/fd")) <= before + 2
