"""A warning when events wait behind the horizon (see `event_order`) for too long.

Readers deliver only events older than every transaction still running in this
database, so one session left open with a transaction id ("idle in
transaction") stalls the event stream until it ends. Nothing is lost, but the
hub's live updates stop; this names the transaction to end.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import psycopg

from jobcore_postgres.event_order import HORIZON
from jobcore_postgres.statements import Dialect

log = logging.getLogger("jobcore.postgres")

Conn = psycopg.Connection[tuple[Any, ...]]

HELD_BACK_WARN_AFTER = 30.0
"""Seconds an event may wait behind the horizon before a warning names what holds it."""
HELD_BACK_CHECK_EVERY = 5.0
"""Seconds between two checks of one store (reads between them are not checked)."""
HELD_BACK_WARN_EVERY = 60.0
"""Seconds between two warnings of one store."""
_SCAN = 100  # held-back events looked at (lowest transaction ids first) for the oldest `at`
_NAMED = 3  # holders named in a warning


def oldest_held_back_sql(d: Dialect) -> str:
    """Milliseconds the oldest visible event behind the horizon has waited (NULL: none),
    walking `events_delivery` from the horizon."""
    return (
        f"SELECT {d.now} - min(at) FROM (SELECT at FROM {d.table('events')} "
        f"WHERE xid >= {HORIZON} ORDER BY xid, seq LIMIT {_SCAN}) held"
    )


HOLDERS_SQL = (
    "SELECT 'pid ' || pid || ' (' || coalesce(state, 'state unknown') || ')', "
    "extract(epoch FROM clock_timestamp() - xact_start)::float8 AS age "
    "FROM pg_stat_activity WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid() "
    "AND datid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "UNION ALL SELECT 'prepared transaction ' || quote_literal(gid), "
    "extract(epoch FROM clock_timestamp() - prepared)::float8 "
    "FROM pg_prepared_xacts WHERE database = current_database() "
    f"ORDER BY age DESC NULLS LAST LIMIT {_NAMED}"
)
"""The oldest open transactions of this database (but the reader's) holding a transaction id."""


class HeldBackWatch:
    """Checks one store's held-back events now and then, and warns at most once a minute."""

    def __init__(self, where: str) -> None:
        self.where = where
        self._busy = threading.Lock()
        self._checked_at = float("-inf")
        self._warned_at = float("-inf")

    def maybe_check(self, conn: Conn, d: Dialect, params: dict[str, Any]) -> None:
        """Check on `conn` if no check ran lately; never raises (a failure is logged at debug).

        Not inside the caller's transaction: its own events wait for it, and a failing
        check must not abort it."""
        now = time.monotonic()
        if now - self._checked_at < HELD_BACK_CHECK_EVERY:
            return
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            return
        if not self._busy.acquire(blocking=False):
            return
        try:
            self._checked_at = now
            self._check(conn, d, params, now)
        except Exception as exc:  # a diagnostic must not fail the read
            log.debug("checking held-back events at %s failed: %r", self.where, exc)
        finally:
            self._busy.release()

    def _check(self, conn: Conn, d: Dialect, params: dict[str, Any], now: float) -> None:
        row = conn.execute(oldest_held_back_sql(d), params).fetchone()
        waited_ms = None if row is None or row[0] is None else int(row[0])
        if waited_ms is None or waited_ms < HELD_BACK_WARN_AFTER * 1000:
            return
        if now - self._warned_at < HELD_BACK_WARN_EVERY:
            return
        holders = conn.execute(HOLDERS_SQL).fetchall()
        named = ", ".join(
            f"{who}, transaction open {'?' if age is None else f'{age:.0f}'} s"
            for who, age in holders
        )
        self._warned_at = now
        log.warning(
            "events at %s have been held back for %.0f s by a transaction still open in "
            "this database: %s; events are delivered once it ends; end it, or set "
            "idle_in_transaction_session_timeout",
            self.where,
            waited_ms / 1000,
            named or "none visible to this role (pg_stat_activity needs pg_read_all_stats)",
        )
