"""The SQLite store's write transaction, entered once per write (enqueue, claim, outcomes)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import apsw

if TYPE_CHECKING:
    from jobcore.storage.sqlite import SQLiteStorage

log = logging.getLogger("jobcore.storage")


class WriteTransaction:
    """`SQLiteStorage._write`'s context manager; a class rather than a generator (every
    write passes here: enqueue, claim, outcomes), so entering and leaving costs less."""

    __slots__ = ("_conn", "_depth", "_mark", "_migrated", "_state", "_storage")

    def __init__(self, storage: SQLiteStorage, migrated: bool) -> None:
        self._storage = storage
        self._migrated = migrated

    def __enter__(self) -> apsw.Connection:
        storage = self._storage
        state = storage._state() if self._migrated else storage._raw_state()
        conn = state.conn
        depth = state.depth
        self._state, self._conn, self._depth, self._mark = state, conn, depth, len(state.callbacks)
        storage._exec(conn, "BEGIN IMMEDIATE" if depth == 0 else f"SAVEPOINT jobcore_{depth}")
        state.depth = depth + 1
        return conn

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        storage, state, conn, depth = self._storage, self._state, self._conn, self._depth
        state.depth = depth
        if kind is not None:  # the exception goes on (None returned) after the rollback
            del state.callbacks[self._mark :]
            if depth == 0:
                if conn.in_transaction:
                    storage._exec(conn, "ROLLBACK")
            elif conn.in_transaction:
                storage._exec(conn, f"ROLLBACK TO jobcore_{depth}; RELEASE jobcore_{depth}")
            return
        if depth:
            storage._exec(conn, f"RELEASE jobcore_{depth}")
            return
        try:
            storage._exec(conn, "COMMIT")
        except BaseException:
            state.callbacks.clear()
            if conn.in_transaction:
                storage._exec(conn, "ROLLBACK")
            raise
        callbacks, state.callbacks = state.callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.exception("after-commit callback failed")
