"""The SQLite backend's pauses of queues and job types (DESIGN §16), a mixin.

Claims read the `pauses` table inside their own write transaction (`_claim_statements`),
so a pause holds for every claim that begins after it commits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import apsw

from jobcore.pauses import Pause, checked_kind, narrow_for_pauses
from jobcore.storage import sqlite_statements as S
from jobcore.storage.rows import rows_of
from jobcore.storage.sqlite_errors import boundary

_ALL = "SELECT kind, name, reason, since, by FROM pauses ORDER BY kind, name"
_KINDS_AND_NAMES = "SELECT kind, name FROM pauses"
_ONE = "SELECT kind, name, reason, since, by FROM pauses WHERE kind = :kind AND name = :name"
_INSERT = (
    "INSERT INTO pauses (kind, name, reason, since, by) "
    "VALUES (:kind, :name, :reason, :now, :by) ON CONFLICT (kind, name) DO NOTHING "
    "RETURNING kind, name, reason, since, by"
)
_DELETE = (
    "DELETE FROM pauses WHERE kind = :kind AND name = :name RETURNING kind, name, reason, since, by"
)
_DEPTHS = (
    "SELECT queue, status, count(*) FROM jobs "
    "WHERE status IN ('scheduled', 'pending', 'claimed') GROUP BY queue, status"
)


MAX_NAMED = 64
"""Up to this many queues (or types) with pending jobs, a claim past paused ones names
them (one index branch each); beyond it, it skips paused rows one by one."""

_PENDING_NAMES = {
    column: f"""
WITH RECURSIVE names(name) AS (
  SELECT (SELECT {column} FROM jobs INDEXED BY jobs_claim_{column}
           WHERE status = 'pending' ORDER BY {column} LIMIT 1)
  UNION ALL
  SELECT (SELECT {column} FROM jobs INDEXED BY jobs_claim_{column}
           WHERE status = 'pending' AND {column} > names.name ORDER BY {column} LIMIT 1)
    FROM names WHERE names.name IS NOT NULL
)
SELECT name FROM names WHERE name IS NOT NULL"""
    for column in ("queue", "type")
}


def _pause(row: tuple[object, ...]) -> Pause:
    kind, name, reason, since, by = row
    return Pause(checked_kind(str(kind)), str(name), str(reason), int(since), str(by))  # type: ignore[call-overload]


class SQLitePauses:
    """`pause`, `resume`, `pauses`, `queue_depths` of `SQLiteStorage`."""

    _write: Callable[..., AbstractContextManager[apsw.Connection]]
    _conn: Callable[[], apsw.Connection]
    now: Callable[[], int]

    def _claim_statements(
        self,
        conn: apsw.Connection,
        queues: Sequence[str],
        types: Sequence[str],
        params: dict[str, Any],
        skipped: tuple[Sequence[str], Sequence[str]] | None = None,
    ) -> tuple[str, ...]:
        """`sqlite_statements.claim` for these filters, less what is paused as this
        transaction sees it; () when every queue or type the claimer takes is paused.

        `skipped`: (queues, types) to skip instead of the pauses read here (the caller
        read them, or adds those at their concurrency limit)."""
        if skipped is None:
            skipped = self._paused(conn)
        paused_queues, paused_types = list(skipped[0]), list(skipped[1])
        if not paused_queues and not paused_types:
            return S.claim(queues, types, params)
        narrowed = narrow_for_pauses(queues, types, paused_queues, paused_types)
        if narrowed is None:
            return ()
        queues, types, skip_queues, skip_types = narrowed
        # Skipping paused rows one by one would read every paused pending job at each
        # claim: name the queues (or types) that have pending jobs instead, found by
        # skipping through their index, so paused backlogs are never read.
        if skip_queues or (skip_types and not queues):
            column = "queue" if skip_queues else "type"
            skip = skip_queues or skip_types
            named = [n for n in self._pending_names(conn, column) if n not in skip]
            if not named:
                return ()
            if len(named) <= MAX_NAMED:
                if column == "type":
                    return S.claim(queues, tuple(named), params, skip_queues, ())
                if not types:
                    return S.claim(tuple(named), (), params, (), skip_types)
                # a claimer of some types reads only the head of each queue (other types'
                # rows may fill it), then, if that did not fill the claim, its own types'
                # rows, skipping the paused queues' ones
                first = S.claim_bounded_by_queue(named, types, params)
                return (first, *S.claim(queues, types, params, skip_queues, skip_types))
        return S.claim(queues, types, params, skip_queues, skip_types)

    @staticmethod
    def _paused(conn: apsw.Connection) -> tuple[list[str], list[str]]:
        """(paused queues, paused types) as this transaction sees them."""
        paused: tuple[list[str], list[str]] = ([], [])
        for kind, name in conn.execute(_KINDS_AND_NAMES):
            paused[0 if kind == "queue" else 1].append(name)
        return paused

    @staticmethod
    def _pending_names(conn: apsw.Connection, column: str) -> list[str]:
        """The queues (or types) that have pending jobs, one index seek each."""
        return [row[0] for row in conn.execute(_PENDING_NAMES[column])]

    @boundary
    def pause(self, kind: str, name: str, *, reason: str, by: str) -> tuple[Pause, bool]:
        params: dict[str, Any] = {"kind": kind, "name": name, "reason": reason, "by": by}
        with self._write() as conn:
            params["now"] = self.now()
            made = rows_of(conn, _INSERT, params)
            if made:
                return _pause(made[0]), True
            return _pause(rows_of(conn, _ONE, params)[0]), False

    @boundary
    def resume(self, kind: str, name: str) -> Pause | None:
        with self._write() as conn:
            rows = rows_of(conn, _DELETE, {"kind": kind, "name": name})
        return _pause(rows[0]) if rows else None

    @boundary
    def pauses(self) -> list[Pause]:
        return [_pause(row) for row in rows_of(self._conn(), _ALL)]

    @boundary
    def queue_depths(self) -> dict[str, dict[str, int]]:
        depths: dict[str, dict[str, int]] = {}
        for queue, status, count in rows_of(self._conn(), _DEPTHS):
            depths.setdefault(str(queue), {})[str(status)] = int(count)
        return depths
