"""The outbox on the application's own APSW connection: checks, and work after its commit."""

from __future__ import annotations

import functools
import logging
import os
import weakref
from collections.abc import Callable
from typing import Any

import apsw

from jobcore.errors import StorageError
from jobcore.storage.sqlite_walindex import ShmFile, hold

log = logging.getLogger("jobcore.storage")


class AppConnections:
    """Application connections jobs were inserted on, and callbacks waiting for their commit.

    APSW calls the commit hook just before the commit completes; the callbacks
    (wake-ups, `jobcore_job_enqueued` notifications) run there and must not use
    that connection. A rollback drops them.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._pending: weakref.WeakKeyDictionary[apsw.Connection, list[Callable[[], None]]]
        self._pending = weakref.WeakKeyDictionary()
        self._hook_id = ("jobcore", id(self))

    def adopt(self, conn: Any) -> apsw.Connection:
        """Check `conn` is an open transaction on our file; watch its commit and rollback."""
        if not isinstance(conn, apsw.Connection):
            raise StorageError(
                f"conn must be an apsw.Connection to {self.path}, not {type(conn).__name__}"
            )
        theirs = os.path.realpath(conn.filename) if conn.filename else ""
        if theirs != os.path.realpath(self.path):
            raise StorageError(
                f"conn is a connection to {conn.filename or 'an in-memory database'!r}, not to "
                f"this queue's database {self.path}; open it on the same file"
            )
        if not conn.in_transaction:
            raise StorageError(
                "conn has no open transaction: run BEGIN (or BEGIN IMMEDIATE) on it first; "
                "the jobs commit or roll back with it"
            )
        if conn not in self._pending:
            self._pending[conn] = []
            hold(conn, ShmFile.acquire(self.path))  # our -shm descriptor outlives it
            ref = weakref.ref(conn)
            conn.set_commit_hook(functools.partial(self._committed, ref), id=self._hook_id)
            conn.set_rollback_hook(functools.partial(self._rolled_back, ref), id=self._hook_id)
        return conn

    def defer(self, conn: Any, callback: Callable[[], None]) -> bool:
        """Queue `callback` for `conn`'s commit; False when there is no transaction to wait for."""
        pending = self._pending.get(conn)
        if pending is None or not conn.in_transaction:
            return False
        pending.append(callback)
        return True

    def _committed(self, ref: weakref.ref[apsw.Connection]) -> bool:
        conn = ref()
        pending = self._pending.get(conn) if conn is not None else None
        if pending:
            callbacks = list(pending)
            pending.clear()
            for callback in callbacks:
                try:
                    callback()
                except Exception:
                    log.exception("after-commit callback failed")
        return False  # never veto the application's commit

    def _rolled_back(self, ref: weakref.ref[apsw.Connection]) -> None:
        conn = ref()
        pending = self._pending.get(conn) if conn is not None else None
        if pending:
            pending.clear()
