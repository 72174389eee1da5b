"""Opening one SQLite connection the way every jobcore connection is set up."""

from __future__ import annotations

import apsw

from jobcore.errors import StorageUnavailable
from jobcore.storage.rows import rows_of
from jobcore.storage.sqlite_busy import busy_waiter
from jobcore.storage.sqlite_errors import storage_error

STATEMENT_CACHE = 128
"""Prepared statements kept per connection (the generated ones outnumber APSW's default 16)."""


def open_connection(path: str, synchronous: str, busy_timeout_ms: int) -> apsw.Connection:
    """A connection in WAL mode with jobcore's pragmas; a `StorageError` if that fails."""
    flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
    try:
        conn = apsw.Connection(path, flags=flags, statementcachesize=STATEMENT_CACHE)
        conn.set_busy_handler(busy_waiter(busy_timeout_ms))  # signals still run
        mode = str(rows_of(conn, "PRAGMA journal_mode")[0][0]).lower()
        if mode != "wal":  # switching needs the write lock: only when not in WAL yet
            mode = _switch_to_wal(conn, busy_timeout_ms)
        if mode != "wal":
            raise StorageUnavailable(f"cannot put {path} in WAL mode (got {mode!r})")
        conn.execute(f"PRAGMA synchronous={synchronous}")
        conn.execute("PRAGMA foreign_keys=ON")
        # Plans that do not depend on bound values: without this, a statement of every group
        # commit was prepared again as its bound values changed (callgrind: one
        # sqlite3Reprepare a commit, ~600k instructions each).
        conn.config(apsw.SQLITE_DBCONFIG_ENABLE_QPSG, 1)
    except apsw.Error as exc:
        raise storage_error(exc, path, busy_timeout_ms) from exc
    return conn


def _switch_to_wal(conn: apsw.Connection, busy_timeout_ms: int) -> str:
    """`PRAGMA journal_mode=WAL`, tried again from the top while the file is busy.

    Two connections switching a new file at once both start in a read, then both want the
    write lock: SQLite answers one of them "busy" at once, without calling its busy
    handler (waiting could deadlock), though the other's switch is over a moment later.
    Tried again, the statement sees the file as the winner left it, already WAL. Waits
    between tries follow the busy handler's schedule and total, so a file really held
    (another program's write in rollback mode) is still waited for, up to the timeout.
    """
    wait = busy_waiter(busy_timeout_ms)
    conn.set_busy_handler(None)
    try:
        tries = 0
        while True:
            try:
                return str(rows_of(conn, "PRAGMA journal_mode=WAL")[0][0]).lower()
            except apsw.BusyError:
                if not wait(tries):
                    raise
                tries += 1
    finally:
        conn.set_busy_handler(busy_waiter(busy_timeout_ms))
