"""Opening one SQLite connection the way every jobcore connection is set up."""

from __future__ import annotations

import logging
import time

import apsw

from jobcore.errors import StorageUnavailable
from jobcore.storage.rows import rows_of
from jobcore.storage.sqlite_busy import busy_waiter, pause
from jobcore.storage.sqlite_errors import storage_error
from jobcore.storage.sqlite_walindex import open_holding_shm

STATEMENT_CACHE = 128
"""Prepared statements kept per connection (the generated ones outnumber APSW's default 16)."""

log = logging.getLogger("jobcore.storage")


def open_connection(path: str, synchronous: str, busy_timeout_ms: int) -> apsw.Connection:
    """A connection in WAL mode with jobcore's pragmas; a `StorageError` if that fails.

    Waiting for locks while it opens takes `busy_timeout_ms` at most, in all."""
    flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
    conn: apsw.Connection | None = None
    try:
        conn = open_holding_shm(
            path, lambda: apsw.Connection(path, flags=flags, statementcachesize=STATEMENT_CACHE)
        )
        mode = into_wal(conn, busy_timeout_ms)
        if mode != "wal":
            raise StorageUnavailable(f"cannot put {path} in WAL mode (got {mode!r})")
        conn.execute(f"PRAGMA synchronous={synchronous}")
        conn.execute("PRAGMA foreign_keys=ON")
        # Plans that do not depend on bound values: without this, a statement of every group
        # commit was prepared again as its bound values changed (callgrind: one
        # sqlite3Reprepare a commit, ~600k instructions each).
        conn.config(apsw.SQLITE_DBCONFIG_ENABLE_QPSG, 1)
    except apsw.Error as exc:
        _close(conn)
        raise storage_error(exc, path, busy_timeout_ms) from exc
    except BaseException:
        _close(conn)
        raise
    return conn


def open_existing(path: str) -> apsw.Connection:
    """A plain read-write connection to the database at `path` (not created), holding the
    process's -shm descriptor (`sqlite_walindex`) for as long as it lives."""
    return open_holding_shm(path, lambda: apsw.Connection(path, flags=apsw.SQLITE_OPEN_READWRITE))


def into_wal(conn: apsw.Connection, busy_timeout_ms: int) -> str:
    """Put `conn`'s file in WAL mode and say the mode it is in (`wal`, unless SQLite
    refused); an `apsw.BusyError` once waiting for locks took `busy_timeout_ms` in all.

    Leaves `conn` with jobcore's busy handler (`sqlite_busy`) for `busy_timeout_ms`."""
    deadline = time.monotonic() + busy_timeout_ms / 1000
    conn.set_busy_handler(busy_waiter(busy_timeout_ms))  # signals still run while waiting
    mode = str(rows_of(conn, "PRAGMA journal_mode")[0][0]).lower()
    if mode != "wal":  # switching needs the write lock: only when not in WAL yet
        mode = _switch_to_wal(conn, deadline)
        conn.set_busy_handler(busy_waiter(busy_timeout_ms))
    return mode


def _switch_to_wal(conn: apsw.Connection, deadline: float) -> str:
    """`PRAGMA journal_mode=WAL`, run again while the file is busy, until `deadline`.

    Two connections switching a new file at once both start with a read, then both want
    the write lock: SQLite answers one of them "busy" at once, without calling its busy
    handler (waiting could deadlock), though the other's switch is over a moment later.
    Run again, the statement sees the file as the winner left it, already WAL. Each run
    keeps the busy handler (with the time left), so a switch that can wait for its lock
    inside SQLite does, keeping new readers out meanwhile.
    """
    tries = 0
    while True:
        left_ms = int((deadline - time.monotonic()) * 1000)
        conn.set_busy_handler(busy_waiter(max(left_ms, 0)))
        try:
            return str(rows_of(conn, "PRAGMA journal_mode=WAL")[0][0]).lower()
        except apsw.BusyError:
            wait = min(pause(tries), deadline - time.monotonic())
            if wait <= 0:
                raise
            time.sleep(wait)
            tries += 1


def _close(conn: apsw.Connection | None) -> None:
    """Close a connection that failed to open; the error that made it fail is the one
    raised, so one from closing is only logged."""
    if conn is not None:
        try:
            conn.close(True)
        except apsw.Error as exc:  # pragma: no cover - closing a half-made connection
            log.debug("closing a connection that failed to open: %s", exc)
