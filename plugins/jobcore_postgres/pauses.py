"""The PostgreSQL backend's pauses of queues and job types (DESIGN §16), a mixin.

The claim statement reads the `pauses` table itself (`statements._not_paused`),
so a pause holds for every claim statement that starts after it commits.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import psycopg

from jobcore.pauses import Pause, checked_kind
from jobcore_postgres.schema import channel
from jobcore_postgres.statements import Dialect

Conn = psycopg.Connection[tuple[Any, ...]]

_COLUMNS = "kind, name, reason, since, by"


def _pause(row: tuple[Any, ...]) -> Pause:
    kind, name, reason, since, by = row
    return Pause(checked_kind(kind), name, reason, int(since), by)


class PostgresPauses:
    """`pause`, `resume`, `pauses`, `queue_depths` of `PostgresStorage`."""

    _d: Dialect
    _connection: Callable[[], AbstractContextManager[Conn]]
    _write: Callable[[], AbstractContextManager[Conn]]
    _params: Callable[..., dict[str, Any]]

    def pause(self, kind: str, name: str, *, reason: str, by: str) -> tuple[Pause, bool]:
        pauses = self._d.table("pauses")
        params = self._params(kind=kind, name=name, reason=reason, by=by)
        with self._write() as conn:
            made = conn.execute(
                f"INSERT INTO {pauses} ({_COLUMNS}) "
                f"VALUES (%(kind)s, %(name)s, %(reason)s, {self._d.now}, %(by)s) "
                f"ON CONFLICT (kind, name) DO NOTHING RETURNING {_COLUMNS}",
                params,
            ).fetchone()
            if made is not None:
                return _pause(made), True
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM {pauses} WHERE kind = %(kind)s AND name = %(name)s",
                params,
            ).fetchone()
        assert row is not None  # the conflicting row: pauses are deleted only by resume
        return _pause(row), False

    def resume(self, kind: str, name: str) -> Pause | None:
        with self._write() as conn:
            row = conn.execute(
                f"DELETE FROM {self._d.table('pauses')} WHERE kind = %s AND name = %s "
                f"RETURNING {_COLUMNS}",
                (kind, name),
            ).fetchone()
            if row is not None:  # wake idle workers and waiting hub claims everywhere
                conn.execute("SELECT pg_notify(%s, '')", (channel(self._d.schema),))
        return None if row is None else _pause(row)

    def pauses(self) -> list[Pause]:
        with self._connection() as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM {self._d.table('pauses')} ORDER BY kind, name"
            ).fetchall()
        return [_pause(row) for row in rows]

    def queue_depths(self) -> dict[str, dict[str, int]]:
        with self._connection() as conn:
            rows = conn.execute(
                f"SELECT queue, status, count(*) FROM {self._d.table('jobs')} "
                "WHERE status IN ('scheduled', 'pending', 'claimed') GROUP BY queue, status"
            ).fetchall()
        depths: dict[str, dict[str, int]] = {}
        for queue, status, count in rows:
            depths.setdefault(queue, {})[status] = int(count)
        return depths
