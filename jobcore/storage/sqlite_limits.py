"""The SQLite backend's global concurrency limits (DESIGN §16), a mixin.

A claim reads the `limits` table inside its own write transaction (SQLite runs
one at a time); with none, it is the plain claim. With limits, it is
`jobcore.limited_claim` over the reads below: the claimed count of every limit
is derived from the claimed rows, so every way out of `claimed` frees a slot.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import apsw

from jobcore.concurrency import Candidate, Limit, checked_scope
from jobcore.limited_claim import claim_limited
from jobcore.rates import (
    OPENS_GRACE_MS,
    ClaimLimits,
    Rate,
    RateUse,
    StartKey,
    push_target,
    rate_use,
)
from jobcore.storage import sqlite_statements as S
from jobcore.storage.rows import rows_of
from jobcore.storage.sqlite_errors import boundary

_ALL = "SELECT scope, name, concurrency, source FROM limits ORDER BY scope, name"
_STATE = (
    "SELECT scope, name, concurrency, NULL FROM limits UNION ALL "
    "SELECT kind, name, NULL, NULL FROM pauses UNION ALL SELECT scope, name, rate, period_ms FROM rates"
)
_RATES = "SELECT scope, name, rate, period_ms, source FROM rates ORDER BY scope, name"
_SET_RATE = (
    "INSERT INTO rates (scope, name, rate, period_ms, source, updated_at) "
    "VALUES (:scope, :name, :rate, :period_ms, 'set', :now) ON CONFLICT (scope, name) DO UPDATE "
    "SET rate = excluded.rate, period_ms = excluded.period_ms, source = 'set', "
    "updated_at = excluded.updated_at"
)
_DECLARE_RATE = (
    "INSERT INTO rates (scope, name, rate, period_ms, source, updated_at) "
    "VALUES (:scope, :name, :rate, :period_ms, 'declared', :now) ON CONFLICT (scope, name) "
    "DO UPDATE SET rate = excluded.rate, period_ms = excluded.period_ms, "
    "updated_at = excluded.updated_at WHERE rates.source = 'declared' "
    "AND (rates.rate <> excluded.rate OR rates.period_ms <> excluded.period_ms)"
)
_CLEAR_RATE = (
    "DELETE FROM rates WHERE scope = :scope AND name = :name "
    "RETURNING scope, name, rate, period_ms, source"
)
_STARTS = (
    "SELECT s.scope, s.name, s.key, sum(s.n), min(s.at) FROM rates r JOIN rate_starts s "
    "ON s.scope = r.scope AND s.name = r.name AND s.at > :now - r.period_ms "
    "GROUP BY s.scope, s.name, s.key"
)
_USE = (  # what `jobcore limits` shows: real starts apart from pushes (`held_until` set)
    "SELECT s.scope, s.name, s.key, sum(CASE WHEN s.held_until IS NULL THEN s.n ELSE 0 END), "
    "max(s.held_until) FROM rates r JOIN rate_starts s ON s.scope = r.scope "
    "AND s.name = r.name AND s.at > :now - r.period_ms GROUP BY s.scope, s.name, s.key"
)
_JOB_LIMITS = "SELECT queue, type, limit_key FROM jobs WHERE id = :id"
_START = "INSERT INTO rate_starts (scope, name, key, at, n) VALUES (:scope, :name, :key, :at, :n)"
_PUSH = (
    "INSERT INTO rate_starts (scope, name, key, at, n, held_until) "
    "VALUES (:scope, :name, :key, :at, :n, :until)"
)
_PRUNE = (
    "DELETE FROM rate_starts WHERE scope = :scope AND name = :name AND at <= :now - "
    "coalesce((SELECT period_ms FROM rates WHERE scope = :scope AND name = :name), 0)"
)
_PRUNE_GONE = (
    "DELETE FROM rate_starts WHERE NOT EXISTS (SELECT 1 FROM rates r "
    "WHERE r.scope = rate_starts.scope AND r.name = rate_starts.name)"
)
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
_UNDECLARE_RATE = _UNDECLARE.replace("FROM limits", "FROM rates")
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
_FIRST_KEY = (
    "SELECT limit_key FROM jobs INDEXED BY jobs_claim_keyed WHERE status = 'pending' "
    "AND limit_key IS NOT NULL AND type = :type ORDER BY limit_key LIMIT 1"
)
_NEXT_KEY = _FIRST_KEY.replace("ORDER BY", "AND limit_key > :after ORDER BY")
_ORDER = "ORDER BY priority DESC, run_at, id"


def _limit(row: Sequence[Any]) -> Limit:
    scope, name, concurrency, source = row
    return Limit(checked_scope(str(scope)), str(name), int(concurrency), source)


def _rate(row: Sequence[Any]) -> Rate:
    scope, name, rate, period_ms, source = row
    return Rate(checked_scope(str(scope)), str(name), int(rate), int(period_ms), source)


def record_starts(conn: apsw.Connection, starts: dict[StartKey, int], now: int) -> None:
    """Write one claim's starts, and delete those of the same limits past their window."""
    for (scope, name, key), n in starts.items():
        conn.execute(_START, {"scope": scope, "name": name, "key": key, "at": now, "n": n})
    for scope, name in {start[:2] for start in starts}:
        conn.execute(_PRUNE, {"scope": scope, "name": name, "now": now})


def _in(column: str, values: Sequence[str], prefix: str, params: dict[str, Any], op: str) -> str:
    if not values:
        return ""
    for index, value in enumerate(values):
        params[f"{prefix}{index}"] = value
    return f" AND {column} {op} ({', '.join(f':{prefix}{i}' for i in range(len(values)))})"


class _Reads:
    """`jobcore.limited_claim.LimitedReads` in one SQLite write transaction."""

    def __init__(
        self,
        store: SQLiteLimits,
        conn: apsw.Connection,
        queues: Sequence[str],
        types: Sequence[str],
        params: dict[str, Any],
    ) -> None:
        self.store, self.conn, self.queues, self.types = store, conn, queues, types
        self.params = params
        self.now: int = params["now"]
        self.cursors: dict[str, str] = store.__dict__.setdefault("_key_cursors", {})

    def held(self) -> dict[tuple[str, str], int]:
        held: dict[tuple[str, str], int] = {}
        for queue, type_, count in self.conn.execute(_HELD):
            for pair in (("queue", queue), ("type", type_)):
                held[pair] = held.get(pair, 0) + count
        return held

    def held_keys(self, type_name: str) -> dict[str, int]:
        return dict(rows_of(self.conn, _HELD_KEYS, {"type": type_name}))

    def paused(self) -> dict[str, set[str]]:
        paused: dict[str, set[str]] = {"queue": set(), "type": set()}
        for kind, name in self.conn.execute(_PAUSED):
            paused.setdefault(kind, set()).add(name)
        return paused

    def candidates(
        self,
        need: int,
        skip_queues: Sequence[str],
        skip_types: Sequence[str],
        rooms: dict[tuple[str, str], int] | None = None,
    ) -> list[Candidate]:
        # `rooms` unused: a refused candidate costs SQLite a statement, not a round trip
        params = {**self.params, "limit": need}
        found: list[Candidate] = []
        statements = self.store._claim_statements(
            self.conn, self.queues, self.types, params, (skip_queues, skip_types)
        )
        for statement in statements:
            found += rows_of(self.conn, S.candidates_of(statement), params)
            if len(found) >= need:
                break
            params["limit"] = need - len(found)
        return found

    def _queue_filter(self, skip_queues: Sequence[str], params: dict[str, Any]) -> str:
        return _in("queue", self.queues, "kq", params, "IN") + _in(
            "queue", skip_queues, "kx", params, "NOT IN"
        )

    def type_head(self, type_name: str, window: int, skip_queues: Sequence[str]) -> list[Candidate]:
        params: dict[str, Any] = {"type": type_name, "window": window}
        where = self._queue_filter(skip_queues, params)
        return rows_of(
            self.conn,
            f"SELECT {S.CANDIDATE_COLUMNS} FROM jobs INDEXED BY jobs_claim_type "
            f"WHERE status = 'pending' AND type = :type{where} {_ORDER} LIMIT :window",
            params,
        )

    def next_key(self, type_name: str, after: str | None) -> str | None:
        params = {"type": type_name, "after": after}
        rows = rows_of(self.conn, _FIRST_KEY if after is None else _NEXT_KEY, params)
        return str(rows[0][0]) if rows else None

    def key_heads(
        self, type_name: str, rooms: dict[str, int], skip_queues: Sequence[str]
    ) -> list[Candidate]:
        params: dict[str, Any] = {"type": type_name}
        where = self._queue_filter(skip_queues, params)
        sql = (
            f"SELECT {S.CANDIDATE_COLUMNS} FROM jobs INDEXED BY jobs_claim_keyed "
            "WHERE status = 'pending' AND limit_key IS NOT NULL AND type = :type "
            f"AND limit_key = :key{where} {_ORDER} LIMIT :window"
        )
        found: list[Candidate] = []
        for key, room in rooms.items():
            params["key"], params["window"] = key, room
            found += rows_of(self.conn, sql, params)
        return found

    def claim_ids(self, ids: list[str], done: int) -> list[Any]:
        return rows_of(self.conn, S.CLAIM_IDS_SQL, {**self.params, "ids": json.dumps(ids)})

    def claim_fitting(
        self,
        need: int,
        skip_queues: Sequence[str],
        skip_types: Sequence[str],
        rooms: dict[tuple[str, str], int],
    ) -> list[Any] | None:
        return None  # a round costs SQLite a statement, not a trip

    def rate_starts(self) -> list[tuple[str, str, str, int, int]]:
        return rows_of(self.conn, _STARTS, {"now": self.now})

    def record_starts(self, starts: dict[StartKey, int], opens: int | None) -> None:
        record_starts(self.conn, starts, self.now)
        self.store._rate_opens = opens


class SQLiteLimits:
    """`set_limit`, `clear_limit`, `limits`, `declare_limits`, `held` of `SQLiteStorage`,
    and the limited claim."""

    _write: Callable[..., AbstractContextManager[apsw.Connection]]
    _conn: Callable[[], apsw.Connection]
    now: Callable[[], int]
    _claim_statements: Callable[..., tuple[str, ...]]

    _rate_opens: int | None = None  # when a full rate limit next has room (a claim saw)

    @staticmethod
    def _claim_state(conn: apsw.Connection) -> tuple[ClaimLimits, tuple[list[str], list[str]]]:
        """Every concurrency and rate limit, and the pauses (queues, types), as this
        transaction sees them: one statement for what every claim reads."""
        limits = ClaimLimits()
        paused: tuple[list[str], list[str]] = ([], [])
        for scope, name, cap, period_ms in conn.execute(_STATE):
            if cap is None:
                paused[0 if scope == "queue" else 1].append(name)
            elif period_ms is None:
                limits.caps[(scope, name)] = cap
            else:
                limits.rates[(scope, name)] = (cap, period_ms)
        return limits, paused

    def rate_opens(self, now: int) -> int | None:
        """When a rate limit the last limited claim found full has room again (store
        clock, ms), if that is still ahead: idle claimers wait for it, not for a poll."""
        opens = self._rate_opens  # a moment past (a waiter woke early by its own clock): due
        return opens if opens is not None and opens > now - OPENS_GRACE_MS else None

    def _claim_limited(
        self,
        conn: apsw.Connection,
        caps: ClaimLimits,
        queues: Sequence[str],
        types: Sequence[str],
        params: dict[str, Any],
    ) -> list[Any]:
        """Claim up to `:limit` pending jobs under every limit in `caps`; the claimed rows
        (none without limits: the plain claim runs instead)."""
        self._rate_opens = None
        if not caps:
            return []
        reads = _Reads(self, conn, queues, types, params)
        return claim_limited(reads, caps, types, params["limit"])

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
    def set_rate(self, scope: str, name: str, rate: int, period_ms: int) -> Rate:
        params = {"scope": scope, "name": name, "rate": rate, "period_ms": period_ms}
        with self._write() as conn:
            params["now"] = self.now()
            conn.execute(_SET_RATE, params)
        return Rate(checked_scope(scope), name, rate, period_ms, "set")

    @boundary
    def clear_rate(self, scope: str, name: str) -> Rate | None:
        with self._write() as conn:
            rows = rows_of(conn, _CLEAR_RATE, {"scope": scope, "name": name})
            conn.execute(_PRUNE_GONE)
        return _rate(rows[0]) if rows else None

    @boundary
    def rates(self) -> list[Rate]:
        return [_rate(row) for row in rows_of(self._conn(), _RATES)]

    @boundary
    def declare_rates(self, declared: Sequence[Rate], unrated: Sequence[str]) -> None:
        with self._write() as conn:
            now = self.now()
            for rate in declared:
                conn.execute(_UNDECLARE_RATE, {"name": rate.name, "keep": rate.scope})
                params = {"scope": rate.scope, "name": rate.name, "rate": rate.rate}
                conn.execute(_DECLARE_RATE, {**params, "period_ms": rate.period_ms, "now": now})
            for name in unrated:
                conn.execute(_UNDECLARE_RATE, {"name": name, "keep": ""})
            conn.execute(_PRUNE_GONE)

    @boundary
    def rate_use(self) -> dict[tuple[str, str], RateUse]:
        """Each rate limit's real starts in its current window (for a key limit, its keys
        at it) and how long a push holds it full."""
        conn = self._conn()
        limits, _ = self._claim_state(conn)
        now = self.now()
        return rate_use(limits.rates, rows_of(conn, _USE, {"now": now}), now)

    @boundary
    def push_rate(self, job_id: str, seconds: float) -> bool:
        """Count the narrowest rate limit job `job_id` falls under as full for `seconds`
        from now (`RetryAfter(..., limit=True)`); False when none applies (or no job)."""
        with self._write() as conn:
            found = rows_of(conn, _JOB_LIMITS, {"id": job_id})
            limits, _ = self._claim_state(conn)
            target = push_target(limits.rates, *found[0]) if found else None
            if target is None:
                return False
            rate, period_ms = limits.rates[target[:2]]
            until = self.now() + round(seconds * 1000)
            params = {"scope": target[0], "name": target[1], "key": target[2], "n": rate}
            conn.execute(_PUSH, {**params, "at": until - period_ms, "until": until})
        self._rate_opens = until if self._rate_opens is None else min(self._rate_opens, until)
        return True

    @boundary
    def held(self) -> dict[tuple[str, str], int]:
        """Claimed jobs per limited (scope, name); for a key limit, the keys at their limit."""
        conn = self._conn()
        limits, _ = self._claim_state(conn)
        caps = limits.caps
        counts: dict[tuple[str, str], int] = {}
        for queue, type_, count in conn.execute(_HELD):
            for pair in (("queue", queue), ("type", type_)):
                if pair in caps:
                    counts[pair] = counts.get(pair, 0) + count
        for (scope, name), cap in caps.items():
            if scope == "key":
                keys = rows_of(conn, _HELD_KEYS, {"type": name})
                counts[(scope, name)] = sum(1 for _, n in keys if n >= cap)
        return counts
