"""The outbox on the application's own psycopg connection, and callbacks run at its commit.

psycopg has no commit hook, so `after_commit(conn=…)` uses the server: the
connection LISTENs on a channel of its own and the transaction NOTIFYs it
with a token naming the callback. The server delivers the notification only
if the transaction commits, during the commit itself, so the callback runs
right after a commit and never after a rollback. This works the same when the
connection is driven by SQLAlchemy (its `driver_connection`).
"""

from __future__ import annotations

import logging
import secrets
import threading
import weakref
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from jobcore.errors import StorageError

log = logging.getLogger("jobcore.postgres")

MAX_PENDING = 10_000  # callbacks of rolled-back transactions are forgotten beyond this


def check(conn: Any) -> None:
    """`conn` must be a psycopg connection inside an open transaction."""
    if not isinstance(conn, psycopg.Connection):
        raise StorageError(
            "conn must be a psycopg (3) Connection to the same database, inside the "
            f"application's transaction; got {type(conn).__name__}"
        )
    status = conn.info.transaction_status
    if status == TransactionStatus.INERROR:
        raise StorageError("the application's transaction on conn has failed; roll it back")
    if status == TransactionStatus.IDLE and not conn.autocommit:
        return  # psycopg opens the transaction with our statement; the application commits it
    if status != TransactionStatus.INTRANS:
        raise StorageError(
            "conn has no open transaction: enqueue inside the application's transaction "
            "(e.g. `with conn.transaction():`) so the jobs commit or roll back with it"
        )


class _Hook:
    """One application connection's channel and the callbacks waiting for its commits."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.channel = f"jobcore_commit_{secrets.token_hex(6)}"
        self.pending: dict[str, Callable[[], None]] = {}
        self.lock = threading.Lock()
        conn.add_notify_handler(self.on_notify)

    def on_notify(self, notify: psycopg.Notify) -> None:
        if notify.channel != self.channel:
            return
        with self.lock:
            callback = self.pending.pop(notify.payload, None)
        if callback is None:
            return
        try:
            callback()
        except Exception:
            log.exception("after-commit callback failed")

    def add(self, callback: Callable[[], None]) -> str:
        token = secrets.token_hex(8)
        with self.lock:
            while len(self.pending) >= MAX_PENDING:
                self.pending.pop(next(iter(self.pending)))
            self.pending[token] = callback
        return token


_hooks: weakref.WeakKeyDictionary[Any, _Hook] = weakref.WeakKeyDictionary()
_hooks_lock = threading.Lock()


def after_commit(conn: Any, callback: Callable[[], None]) -> None:
    """Run `callback` once `conn`'s open transaction commits; now if none is open."""
    if (
        not isinstance(conn, psycopg.Connection)
        or conn.info.transaction_status != TransactionStatus.INTRANS
    ):
        callback()
        return
    with _hooks_lock:
        hook = _hooks.get(conn)
        if hook is None:
            hook = _hooks[conn] = _Hook(conn)
    token = hook.add(callback)
    # LISTEN again in every transaction: a rolled-back one takes its LISTEN with it
    conn.execute(f"LISTEN {hook.channel}; NOTIFY {hook.channel}, '{token}'".encode())
