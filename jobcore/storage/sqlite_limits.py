"""The SQLite backend's global concurrency limits (DESIGN §16), a mixin.

A claim reads the `limits` table inside its own write transaction; with none,
it is the plain claim. With limits, it counts the claimed rows per limited
queue, type and key (from the claimed rows themselves: nothing to keep in
sync), skips the queues and types at their limit as it skips paused ones,
reads keyed types through their own index so that keys at their limit are
never read row by row, and claims by id only what fits under every limit.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import apsw

from jobcore.concurrency import Candidate, Limit, Room, checked_scope
from jobcore.storage import sqlite_statements as S
from jobcore.storage.rows import rows_of
from jobcore.storage.sqlite_errors import boundary

_ALL = "SELECT scope, name, concurrency, source FROM limits ORDER BY scope, name"
_CAPS = "SELECT scope, name, concurrency FROM limits"
_SET = (
    "INSERT INTO limits (scope, name, concurrency, source, updated_at) "
    "VALUES (:scope, :name, :concurrency, 'set', :now) ON CONFLICT (scope, name) DO UPDATE "
    "SET concurrency = excluded.concurrency, source = 'set', updated_at = excluded.updated_at"
)
_DECLARE = (
    "INSERT INTO limits (scope, name, concurrency, source, updated_at) "
    "VALUES (:scope, :name, :concurrency, 'declared', :now) ON CONFLICT (scope, name) DO UPDATE "
    "SET concurrency = excluded.concurrency, updated_at = excluded.updated_at "
    "WHERE limits.source = 'declared' AND limits.concurrency <> excluded.concurrency"
)
_UNDECLARE = (
    "DELETE FROM limits WHERE source = 'declared' AND scope IN ('type', 'key') AND name = :name "
    "AND scope <> :keep"
)
_CLEAR = (
    "DELETE FROM limits WHERE scope = :scope AND name = :name "
    "RETURNING scope, name, concurrency, source"
)
_PAUSED = "SELECT kind, name FROM pauses"
_HELD = (
    "SELECT queue, type, count(*) FROM jobs INDEXED BY jobs_leases "
    "WHERE status = 'claimed' GROUP BY queue, type"
)
_HELD_KEYS = (
    "SELECT limit_key, count(*) FROM jobs INDEXED BY jobs_held_keyed "
    "WHERE status = 'claimed' AND limit_key IS NOT NULL AND type = :type GROUP BY limit_key"
)
_KEYS = """
WITH RECURSIVE keys(k) AS (
  SELECT (SELECT limit_key FROM jobs INDEXED BY jobs_claim_keyed
           WHERE status = 'pending' AND limit_key IS NOT NULL AND type = :type
           ORDER BY limit_key LIMIT 1)
  UNION ALL
  SELECT (SELECT limit_key FROM jobs INDEXED BY jobs_claim_keyed
           WHERE status = 'pending' AND limit_key IS NOT NULL AND type = :type
             AND limit_key > keys.k ORDER BY limit_key LIMIT 1)
    FROM keys WHERE keys.k IS NOT NULL
)
SELECT k FROM keys WHERE k IS NOT NULL"""
_ORDER = "ORDER BY priority DESC, run_at, id"

MAX_ROUNDS = 8
"""A limited claim picks and claims in rounds (a round ends when a queue or type
it was taking from reaches its limit); at most this many per claim."""


def _limit(row: Sequence[Any]) -> Limit:
    scope, name, concurrency, source = row
    return Limit(checked_scope(str(scope)), str(name), int(concurrency), source)


def _queue_filter(queues: Sequence[str], skip: Iterable[str], params: dict[str, Any]) -> str:
    where = ""
    if queues:
        names = []
        for index, name in enumerate(queues):
            params[f"kq{index}"] = name
            names.append(f":kq{index}")
        where += f" AND queue IN ({', '.join(names)})"
    skipped = []
    for index, name in enumerate(skip):
        params[f"kx{index}"] = name
        skipped.append(f":kx{index}")
    if skipped:
        where += f" AND queue NOT IN ({', '.join(skipped)})"
    return where


class SQLiteLimits:
    """`set_limit`, `clear_limit`, `limits`, `declare_limits`, `held` of `SQLiteStorage`,
    and the limited claim."""

    _write: Callable[..., AbstractContextManager[apsw.Connection]]
    _conn: Callable[[], apsw.Connection]
    now: Callable[[], int]
    _claim_statements: Callable[..., tuple[str, ...]]

    @staticmethod
    def _caps(conn: apsw.Connection) -> dict[tuple[str, str], int]:
        """Every limit as this transaction sees it: (scope, name) -> concurrency."""
        return {(scope, name): cap for scope, name, cap in conn.execute(_CAPS)}

    def _claim_limited(
        self,
        conn: apsw.Connection,
        caps: dict[tuple[str, str], int],
        queues: Sequence[str],
        types: Sequence[str],
        params: dict[str, Any],
    ) -> list[Any]:
        """Claim up to `:limit` pending jobs under every limit in `caps`; the claimed rows
        (none without limits: the plain claim runs instead)."""
        if not caps:
            return []
        held: dict[tuple[str, str], int] = {}
        if any(scope != "key" for scope, _ in caps):
            for queue, type_, count in conn.execute(_HELD):
                for pair in (("queue", queue), ("type", type_)):
                    held[pair] = held.get(pair, 0) + count
        room = Room(caps, held)
        keyed = sorted(name for scope, name in caps if scope == "key")
        if types:
            keyed = [name for name in keyed if name in types]
        paused: dict[str, set[str]] = {"queue": set(), "type": set()}
        for kind, name in conn.execute(_PAUSED):
            paused.setdefault(kind, set()).add(name)
        for name in keyed:
            room.keys[name] = {
                key: caps[("key", name)] - count
                for key, count in conn.execute(_HELD_KEYS, {"type": name})
            }
        wanted = params["limit"]
        rows: list[Any] = []
        all_keyed = [name for scope, name in caps if scope == "key"]
        for _ in range(MAX_ROUNDS):
            need = wanted - len(rows)
            if need <= 0:
                break
            params["limit"] = need
            held_queues = room.full("queue")
            held_types = sorted({*room.full("type"), *all_keyed})
            candidates: list[Candidate] = []
            statements = self._claim_statements(
                conn, queues, types, params, held_queues, held_types
            )
            for statement in statements:
                candidates += rows_of(conn, S.candidates_of(statement), params)
                if len(candidates) >= need:
                    break
                params["limit"] = need - len(candidates)
            params["limit"] = need
            skip_queues = {*held_queues, *paused["queue"]}
            for name in keyed:
                if name in paused["type"] or name in room.full("type"):
                    continue
                candidates += self._keyed_candidates(conn, name, room, queues, skip_queues, need)
            candidates.sort(key=lambda c: (-c[1], c[2], c[0]))
            chosen: list[str] = []
            refused = False
            for candidate in dict.fromkeys(candidates):
                if len(chosen) >= need:
                    break
                if room.take(candidate):
                    chosen.append(candidate[0])
                else:
                    refused = True
            if chosen:
                params["ids"] = json.dumps(chosen)
                rows += rows_of(conn, S.CLAIM_IDS_SQL, params)
            if not refused or not chosen:
                break
        params["limit"] = wanted
        return rows

    def _keyed_candidates(
        self,
        conn: apsw.Connection,
        type_name: str,
        room: Room,
        queues: Sequence[str],
        skip_queues: Iterable[str],
        need: int,
    ) -> list[Candidate]:
        """Pending jobs of a key-limited type in claim order, none of a key at its limit.

        First the head of the type's pending rows (cheap when few keys are full);
        when keys at their limit fill that window, each key's own head instead,
        one index seek per key with pending jobs, so their backlog is never read."""
        params: dict[str, Any] = {"type": type_name}
        where = _queue_filter(queues, skip_queues, params)
        window = 4 * need + 64
        params["window"] = window
        head: list[Candidate] = rows_of(
            conn,
            f"SELECT {S.CANDIDATE_COLUMNS} FROM jobs INDEXED BY jobs_claim_type "
            f"WHERE status = 'pending' AND type = :type{where} {_ORDER} LIMIT :window",
            params,
        )
        keys = room.keys[type_name]
        cap = room.caps[("key", type_name)]
        fits = [c for c in head if c[5] is None or keys.get(c[5], cap) > 0]
        if len(fits) >= need or len(head) < window:
            return fits
        found: list[Candidate] = []
        for (key,) in rows_of(conn, _KEYS, {"type": type_name}):
            left = keys.get(key, cap)
            if left <= 0:
                continue
            params["key"], params["window"] = key, min(left, need)
            found += rows_of(
                conn,
                f"SELECT {S.CANDIDATE_COLUMNS} FROM jobs INDEXED BY jobs_claim_keyed "
                f"WHERE status = 'pending' AND limit_key IS NOT NULL AND type = :type "
                f"AND limit_key = :key{where} {_ORDER} LIMIT :window",
                params,
            )
        return [c for c in head if c[5] is None] + found

    @boundary
    def set_limit(self, scope: str, name: str, concurrency: int) -> Limit:
        params = {"scope": scope, "name": name, "concurrency": concurrency}
        with self._write() as conn:
            params["now"] = self.now()
            conn.execute(_SET, params)
        return Limit(checked_scope(scope), name, concurrency, "set")

    @boundary
    def clear_limit(self, scope: str, name: str) -> Limit | None:
        with self._write() as conn:
            rows = rows_of(conn, _CLEAR, {"scope": scope, "name": name})
        return _limit(rows[0]) if rows else None

    @boundary
    def limits(self) -> list[Limit]:
        return [_limit(row) for row in rows_of(self._conn(), _ALL)]

    @boundary
    def declare_limits(self, declared: Sequence[Limit], unlimited: Sequence[str]) -> None:
        with self._write() as conn:
            now = self.now()
            for limit in declared:
                conn.execute(_UNDECLARE, {"name": limit.name, "keep": limit.scope})
                conn.execute(_DECLARE, {**limit.to_json(), "now": now})
            for name in unlimited:
                conn.execute(_UNDECLARE, {"name": name, "keep": ""})

    @boundary
    def held(self) -> dict[tuple[str, str], int]:
        """Claimed jobs per limited (scope, name); for a key limit, the keys at their limit."""
        conn = self._conn()
        caps = self._caps(conn)
        counts: dict[tuple[str, str], int] = {}
        for queue, type_, count in conn.execute(_HELD):
            for pair in (("queue", queue), ("type", type_)):
                if pair in caps:
                    counts[pair] = counts.get(pair, 0) + count
        for (scope, name), cap in caps.items():
            if scope == "key":
                full = sum(1 for _, n in conn.execute(_HELD_KEYS, {"type": name}) if n >= cap)
                counts[(scope, name)] = full
        return counts
