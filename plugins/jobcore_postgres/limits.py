"""The PostgreSQL backend's global concurrency limits (DESIGN §16), a mixin.

The plain claim statement claims nothing while the `limits` table has a row
(a one-time filter in `statements.claim_statement`). Claims then go through
`jobcore.limited_claim` in the transaction of the worker's commit, after its
outcomes: it takes an advisory lock, so limited claims run one at a time and
each sees the claims committed before it; the claimed count of every limit is
read from the claimed rows (an index each), so every way out of `claimed` frees
a slot. The lock, the limits, those counts and the pauses go out in the trip of
the outcomes (`_send_limited`). Whether
limits exist is re-read at most every `LIMITS_CHECK_EVERY` seconds, and at once
when the process's listener hears a change of limits or rates (`LIMITS_CHANGED`,
sent by every transaction that makes one): a limit set elsewhere holds at once
(the plain claim stops), and the limited claims start as soon as that
notification arrives (within `LIMITS_CHECK_EVERY` while no listener runs).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import psycopg

from jobcore import rates as rate_limits
from jobcore.concurrency import Candidate, Limit, checked_scope
from jobcore.limited_claim import claim_limited
from jobcore.models import Job
from jobcore.rates import OPENS_GRACE_MS, ClaimLimits, Rate, StartKey, push_target
from jobcore_postgres.listener import Listener
from jobcore_postgres.rows import row_to_job
from jobcore_postgres.schema import LIMITS_CHANGED, channel
from jobcore_postgres.statements import Dialect, claim_ids_statement, claim_picked_statement

Conn = psycopg.Connection[tuple[Any, ...]]

LIMITS_CHECK_EVERY = 1.0
"""Seconds a store trusts its last look at whether any limit exists."""

_UNSEEN: tuple[float, bool, int | None] = (float("-inf"), False, None)

_ORDER = "priority DESC, run_at, id"
_CANDIDATE = "p.id, p.priority, p.run_at, p.queue, p.type, p.limit_key"
_COLUMNS = "scope, name, concurrency, source"
_RATE_COLUMNS = "scope, name, rate, period_ms, source"


def _limit(row: Sequence[Any]) -> Limit:
    scope, name, concurrency, source = row
    return Limit(checked_scope(scope), name, int(concurrency), source)


def _rate(row: Sequence[Any]) -> Rate:
    scope, name, rate, period_ms, source = row
    return Rate(checked_scope(scope), name, int(rate), int(period_ms), source)


def _claim_limits(d: Dialect, conn: Conn) -> ClaimLimits:
    """Every concurrency and rate limit, in one statement."""
    limits = ClaimLimits()
    for scope, name, value, period_ms in conn.execute(
        f"SELECT scope, name, concurrency, NULL::bigint FROM {d.table('limits')} UNION ALL "
        f"SELECT scope, name, rate, period_ms FROM {d.table('rates')}"
    ):
        if period_ms is None:
            limits.caps[(scope, name)] = int(value)
        else:
            limits.rates[(scope, name)] = (int(value), int(period_ms))
    return limits


_LOCK = "SELECT pg_advisory_xact_lock(hashtext(%(lock)s))"


def _lock_name(d: Dialect) -> str:
    return f"jobcore limits {d.schema}"


def _claim_state_sql(d: Dialect) -> str:
    """Every concurrency and rate limit, the store's clock, the starts in each rate limit's
    window at that clock, the claimed jobs per (queue, type) when a queue or type limit
    exists (a one-time filter: not read otherwise), and the pauses: one statement (the
    clock read once, in a CTE)."""
    jobs = d.table("jobs")
    return (
        f"WITH t AS MATERIALIZED (SELECT {d.now} AS now) "
        f"SELECT 'c', scope, name, '', concurrency::bigint, NULL::bigint FROM {d.table('limits')} "
        f"UNION ALL SELECT 'r', scope, name, '', rate::bigint, period_ms FROM {d.table('rates')} "
        "UNION ALL SELECT 'n', '', '', '', t.now, NULL FROM t "
        "UNION ALL SELECT 's', s.scope, s.name, s.key, sum(s.n)::bigint, min(s.at) "
        f"FROM t, {d.table('rates')} r JOIN {d.table('rate_starts')} s "
        "ON s.scope = r.scope AND s.name = r.name WHERE s.at > t.now - r.period_ms "
        "GROUP BY s.scope, s.name, s.key "
        f"UNION ALL SELECT 'h', queue, type, '', count(*), NULL FROM {jobs} "
        f"WHERE status = 'claimed' AND EXISTS (SELECT 1 FROM {d.table('limits')} "
        "WHERE scope <> 'key') GROUP BY queue, type "
        f"UNION ALL SELECT 'p', kind, name, '', NULL, NULL FROM {d.table('pauses')}"
    )


class _State:
    """What `_claim_state_sql` read."""

    def __init__(self, rows: Sequence[Sequence[Any]]) -> None:
        self.limits = ClaimLimits()
        self.now = 0
        self.starts: list[tuple[str, str, str, int, int]] = []
        self.held: dict[tuple[str, str], int] = {}
        self.paused: dict[str, set[str]] = {"queue": set(), "type": set()}
        for kind, scope, name, key, value, extra in rows:
            if kind == "c":
                self.limits.caps[(scope, name)] = int(value)
            elif kind == "r":
                self.limits.rates[(scope, name)] = (int(value), int(extra))
            elif kind == "n":
                self.now = int(value)
            elif kind == "s":
                self.starts.append((scope, name, key, int(value), int(extra)))
            elif kind == "h":  # scope: the queue, name: the type
                for pair in (("queue", scope), ("type", name)):
                    self.held[pair] = self.held.get(pair, 0) + int(value)
            else:
                self.paused.setdefault(scope, set()).add(name)


def _use_sql(d: Dialect) -> str:
    """What `jobcore limits` shows: the real starts in each window apart from pushes
    (`held_until` set), and the latest push's end."""
    return (
        f"SELECT s.scope, s.name, s.key, sum(s.n) FILTER (WHERE s.held_until IS NULL), "
        f"max(s.held_until) FROM {d.table('rates')} r "
        f"JOIN {d.table('rate_starts')} s ON s.scope = r.scope AND s.name = r.name "
        "AND s.at > %(now)s - r.period_ms GROUP BY s.scope, s.name, s.key"
    )


def _prune_gone_sql(d: Dialect) -> str:
    """Delete the starts of rate limits that no longer exist (as SQLite's `_PRUNE_GONE`)."""
    return (
        f"DELETE FROM {d.table('rate_starts')} s WHERE NOT EXISTS (SELECT 1 FROM "
        f"{d.table('rates')} r WHERE r.scope = s.scope AND r.name = s.name)"
    )


def _skip_scan(jobs: str, column: str, where: str = "") -> str:
    """The distinct values of `column` among pending rows, one index seek each."""
    first = f"SELECT {column} FROM {jobs} WHERE status = 'pending'{where} ORDER BY {column} LIMIT 1"
    after = (
        f"SELECT {column} FROM {jobs} WHERE status = 'pending'{where} AND {column} > f.name "
        f"ORDER BY {column} LIMIT 1"
    )
    return (
        f"WITH RECURSIVE f(name) AS (SELECT ({first}) "
        f"UNION ALL SELECT ({after}) FROM f WHERE f.name IS NOT NULL) "
        "SELECT name FROM f WHERE name IS NOT NULL"
    )


_FILTERS = (
    " AND (cardinality(%(queues)s::text[]) = 0 OR p.queue = ANY(%(queues)s::text[]))"
    " AND (cardinality(%(types)s::text[]) = 0 OR p.type = ANY(%(types)s::text[]))"
    " AND p.queue <> ALL(%(skip_queues)s::text[])"
)


class _Reads:
    """`jobcore.limited_claim.LimitedReads` in one PostgreSQL transaction."""

    def __init__(
        self,
        d: Dialect,
        conn: Conn,
        params: dict[str, Any],
        cursors: dict[str, str],
        state: _State | None = None,
    ) -> None:
        self.d, self.conn, self.params, self.cursors = d, conn, params, cursors
        self.jobs = d.table("jobs")
        self.now: int = params.get("now") or 0
        self.opens: int | None = None
        self.state = state
        self.later: psycopg.Cursor[Any] | None = None  # `claim_fitting`'s, read after COMMIT

    def rate_starts(self) -> list[tuple[str, str, str, int, int]]:
        return [] if self.state is None else self.state.starts

    def record_starts(self, starts: dict[StartKey, int], opens: int | None) -> None:
        self.opens = opens
        if not starts:
            return
        table, rates = self.d.table("rate_starts"), self.d.table("rates")
        scopes, names, keys = (list(column) for column in zip(*starts, strict=True))
        self.conn.execute(  # the new starts, and this limit's starts past its window
            f"WITH ins AS (INSERT INTO {table} (scope, name, key, at, n) "
            "SELECT s, m, k, %(now)s, c FROM unnest(%(scopes)s::text[], %(names)s::text[], "
            "%(keys)s::text[], %(counts)s::int[]) AS u(s, m, k, c)) "
            f"DELETE FROM {table} t USING {rates} r, unnest(%(scopes)s::text[], "
            "%(names)s::text[]) AS u(s, m) WHERE t.scope = u.s AND t.name = u.m "
            "AND r.scope = u.s AND r.name = u.m AND t.at <= %(now)s - r.period_ms",
            {
                "now": self.now,
                "scopes": scopes,
                "names": names,
                "keys": keys,
                "counts": list(starts.values()),
            },
        )

    def held(self) -> dict[tuple[str, str], int]:
        if self.state is not None:  # read with the limits (`_claim_state_sql`)
            return dict(self.state.held)
        held: dict[tuple[str, str], int] = {}
        for queue, type_, count in self.conn.execute(
            f"SELECT queue, type, count(*) FROM {self.jobs} WHERE status = 'claimed' "
            "GROUP BY queue, type"
        ):
            for pair in (("queue", queue), ("type", type_)):
                held[pair] = held.get(pair, 0) + int(count)
        return held

    def held_keys(self, type_name: str) -> dict[str, int]:
        rows = self.conn.execute(
            f"SELECT limit_key, count(*) FROM {self.jobs} WHERE status = 'claimed' "
            "AND limit_key IS NOT NULL AND type = %s GROUP BY limit_key",
            (type_name,),
        ).fetchall()
        return {key: int(count) for key, count in rows}

    def paused(self) -> dict[str, set[str]]:
        assert self.state is not None  # only a claim asks, and it read them
        return {kind: set(names) for kind, names in self.state.paused.items()}

    def candidates(
        self,
        need: int,
        skip_queues: Sequence[str],
        skip_types: Sequence[str],
        rooms: dict[tuple[str, str], int] | None = None,
    ) -> list[Candidate]:
        _, sql, params = self._candidates(need, skip_queues, skip_types, rooms or {})
        return [tuple(row) for row in self.conn.execute(sql, params)]

    def claim_fitting(
        self,
        need: int,
        skip_queues: Sequence[str],
        skip_types: Sequence[str],
        rooms: dict[tuple[str, str], int],
    ) -> list[Any] | None:
        lead, sql, params = self._candidates(need, skip_queues, skip_types, rooms)
        if any(scope != lead for scope, _ in rooms):
            return None  # the read bounds only the lead scope's rooms: claim in rounds
        pick = (
            f"SELECT p.id, p.priority, p.run_at FROM {self.jobs} p "
            f"WHERE p.id = ANY(ARRAY(SELECT c.id FROM ({sql}) AS c)) AND p.status = 'pending' "
            f"ORDER BY p.{_ORDER} FOR UPDATE SKIP LOCKED"
        )
        # its rows are read once the transaction commits: the claim and COMMIT, one trip
        self.later = self.conn.execute(claim_picked_statement(self.d, pick), params)
        return []

    def _candidates(
        self,
        need: int,
        skip_queues: Sequence[str],
        skip_types: Sequence[str],
        rooms: dict[tuple[str, str], int],
    ) -> tuple[str, str, dict[str, Any]]:
        """(the lead scope, the candidates' read, its parameters) for `candidates`."""
        # walk each open queue (when some are skipped) or each open type, its own index
        # slice: the skipped ones' backlogs are not read; from a limited one, no more rows
        # than it has room for (more would be refused, and cost a round to claim others)
        lead = "queue" if skip_queues else "type"
        mine = self.params["queues" if lead == "queue" else "types"]
        skip = list(skip_queues if lead == "queue" else skip_types)
        names = (
            "SELECT name FROM unnest(%(mine)s::text[]) AS u(name)"
            if mine
            else _skip_scan(self.jobs, lead)
        )
        room = {name: left for (scope, name), left in rooms.items() if scope == lead}
        sql = (
            f"SELECT c.* FROM ({names}) AS n(name) LEFT JOIN unnest(%(room_names)s::text[], "
            "%(room_left)s::int[]) AS r(name, left_) ON r.name = n.name, "
            f"LATERAL (SELECT {_CANDIDATE} "
            f"FROM {self.jobs} p WHERE p.status = 'pending' AND p.{lead} = n.name{_FILTERS} "
            "AND p.type <> ALL(%(skip_types)s::text[]) ORDER BY "
            f"p.{_ORDER} LIMIT least(%(need)s, coalesce(r.left_, %(need)s))) c "
            f"WHERE n.name <> ALL(%(skip)s::text[]) "
            f"ORDER BY c.{_ORDER.replace(', ', ', c.')} LIMIT %(need)s"
        )
        params = {
            **self.params,
            "mine": list(mine),
            "skip": skip,
            "need": need,
            "skip_queues": list(skip_queues),
            "skip_types": list(skip_types),
            "room_names": list(room),
            "room_left": [max(0, left) for left in room.values()],
        }
        return lead, sql, params

    def type_head(self, type_name: str, window: int, skip_queues: Sequence[str]) -> list[Candidate]:
        sql = (
            f"SELECT {_CANDIDATE} FROM {self.jobs} p WHERE p.status = 'pending' "
            f"AND p.type = %(type)s{_FILTERS} ORDER BY p.{_ORDER} LIMIT %(window)s"
        )
        params = {
            **self.params,
            "type": type_name,
            "window": window,
            "skip_queues": list(skip_queues),
        }
        return [tuple(row) for row in self.conn.execute(sql, params)]

    def next_key(self, type_name: str, after: str | None) -> str | None:
        after_ = "" if after is None else " AND limit_key > %(after)s"
        row = self.conn.execute(
            f"SELECT limit_key FROM {self.jobs} WHERE status = 'pending' "
            f"AND limit_key IS NOT NULL AND type = %(type)s{after_} ORDER BY limit_key LIMIT 1",
            {"type": type_name, "after": after},
        ).fetchone()
        return None if row is None else str(row[0])

    def key_heads(
        self, type_name: str, rooms: dict[str, int], skip_queues: Sequence[str]
    ) -> list[Candidate]:
        if not rooms:
            return []
        sql = (
            "SELECT c.* FROM unnest(%(keys)s::text[], %(rooms)s::int[]) AS k(key, room), "
            f"LATERAL (SELECT {_CANDIDATE} FROM {self.jobs} p WHERE p.status = 'pending' "
            "AND p.limit_key IS NOT NULL AND p.type = %(type)s AND p.limit_key = k.key"
            f"{_FILTERS} ORDER BY p.{_ORDER} LIMIT k.room) c"
        )
        params = {
            **self.params,
            "type": type_name,
            "keys": list(rooms),
            "rooms": list(rooms.values()),
            "skip_queues": list(skip_queues),
        }
        return [tuple(row) for row in self.conn.execute(sql, params)]

    def claim_ids(self, ids: list[str], done: int) -> list[Any]:
        params = {**self.params, "ids": ids, "start": max(0, self.params["start"] - done)}
        return self.conn.execute(claim_ids_statement(self.d), params).fetchall()


class PostgresLimits:
    """`set_limit`, `clear_limit`, `limits`, `declare_limits`, `held` of `PostgresStorage`,
    and its limited claim."""

    _d: Dialect
    _connection: Callable[[], AbstractContextManager[Conn]]
    _write: Callable[[], AbstractContextManager[Conn]]
    _batch: Callable[[], AbstractContextManager[Conn]]
    _statement: Callable[..., str]
    _params: Callable[..., dict[str, Any]]
    _listener: Listener | None
    _limits_seen: tuple[float, bool, int | None] = _UNSEEN  # (when, whether, heard count)
    _rate_opens: int | None = None  # when a full rate limit next has room (a claim saw)

    def rate_opens(self, now: int) -> int | None:
        """When a rate limit the last limited claim found full has room again, if ahead."""
        opens = self._rate_opens  # a moment past (a waiter woke early by its own clock): due
        return opens if opens is not None and opens > now - OPENS_GRACE_MS else None

    def _limits_exist(self) -> bool:
        """Whether any limit exists, as read at most `LIMITS_CHECK_EVERY` seconds ago and
        since the last change this process's listener heard (`LIMITS_CHANGED`)."""
        seen_at, exist, heard = self._limits_seen
        listener = self._listener
        hearing = listener.limits_count if listener is not None and listener.connected else None
        now = time.monotonic()
        if now - seen_at < LIMITS_CHECK_EVERY and hearing == heard:
            return exist
        with self._connection() as conn:
            row = conn.execute(
                f"SELECT EXISTS (SELECT 1 FROM {self._d.table('limits')}) "
                f"OR EXISTS (SELECT 1 FROM {self._d.table('rates')})"
            ).fetchone()
        exist = bool(row and row[0])
        self._limits_seen = (now, exist, hearing)  # `hearing` read before: none missed
        return exist

    def _notify(self, conn: Conn) -> None:
        """In a transaction that changes the limits or rates: at its commit, tell every
        listening process (its workers wake, its next claim reads whether limits exist)."""
        conn.execute("SELECT pg_notify(%s, %s)", (channel(self._d.schema), LIMITS_CHANGED))

    def _send_limited(
        self,
        conn: Conn,
        worker: str,
        limit: int,
        lease_ms: int,
        queues: Sequence[str],
        types: Sequence[str],
        start: int | None,
    ) -> tuple[dict[str, Any], psycopg.Cursor[Any]]:
        """Queue a limited claim's advisory lock and its reads (`_claim_state_sql`, a
        statement of its own: its snapshot is taken once the lock is held). In a pipeline
        they go out in one trip with what the transaction queued before them."""
        d = self._d
        params = self._params(
            worker=worker,
            limit=limit,
            lease_ms=lease_ms,
            start=limit if start is None else start,
            queues=list(queues),
            types=list(types),
        )
        conn.execute(_LOCK, {"lock": _lock_name(d)})
        return params, conn.execute(self._statement("limits_state", _claim_state_sql, d), params)

    def _finish_limited(
        self,
        conn: Conn,
        sent: tuple[dict[str, Any], psycopg.Cursor[Any]],
        types: Sequence[str],
        limit: int,
    ) -> tuple[list[Any], psycopg.Cursor[Any] | None, int | None]:
        """The limited claim `_send_limited` began: the rows claimed, the cursor of the
        rows claimed in the COMMIT's trip (read them with `_limited_jobs` once it has
        committed), and when a full rate limit next has room (for `rate_opens`)."""
        params, cursor = sent
        state = _State(cursor.fetchall())
        if state.limits.rates:  # the claim's clock, read once: its claimed_at and windows
            params["now"] = state.now
        cursors: dict[str, str] = self.__dict__.setdefault("_key_cursors", {})
        reads = _Reads(self._d, conn, params, cursors, state)
        rows = claim_limited(reads, state.limits, types, limit)
        return rows, reads.later, reads.opens

    @staticmethod
    def _limited_jobs(rows: list[Any], later: psycopg.Cursor[Any] | None) -> list[Job]:
        """The jobs of a committed limited claim (`_finish_limited`), in claim order."""
        if later is not None:
            rows = [*rows, *later.fetchall()]
        jobs = [row_to_job(row) for row in rows]
        jobs.sort(key=lambda job: (-job.priority, job.run_at, job.id))
        return jobs

    def set_limit(self, scope: str, name: str, concurrency: int) -> Limit:
        with self._write() as conn:
            row = conn.execute(
                f"INSERT INTO {self._d.table('limits')} ({_COLUMNS}, updated_at) "
                f"VALUES (%(scope)s, %(name)s, %(concurrency)s, 'set', {self._d.now}) "
                "ON CONFLICT (scope, name) DO UPDATE SET concurrency = excluded.concurrency, "
                f"source = 'set', updated_at = excluded.updated_at RETURNING {_COLUMNS}",
                self._params(scope=scope, name=name, concurrency=concurrency),
            ).fetchone()
            self._notify(conn)
        self._limits_seen = _UNSEEN
        assert row is not None
        return _limit(row)

    def clear_limit(self, scope: str, name: str) -> Limit | None:
        with self._write() as conn:
            row = conn.execute(
                f"DELETE FROM {self._d.table('limits')} WHERE scope = %s AND name = %s "
                f"RETURNING {_COLUMNS}",
                (scope, name),
            ).fetchone()
            if row is not None:
                self._notify(conn)
        self._limits_seen = _UNSEEN
        return None if row is None else _limit(row)

    def limits(self) -> list[Limit]:
        with self._connection() as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM {self._d.table('limits')} ORDER BY scope, name"
            ).fetchall()
        return [_limit(row) for row in rows]

    def declare_limits(self, declared: Sequence[Limit], unlimited: Sequence[str]) -> None:
        table = self._d.table("limits")
        undeclare = (
            f"DELETE FROM {table} WHERE source = 'declared' AND scope IN ('type', 'key') "
            "AND name = %(name)s AND scope <> %(keep)s"
        )
        with self._write() as conn:
            for limit in declared:
                conn.execute(undeclare, {"name": limit.name, "keep": limit.scope})
                conn.execute(
                    f"INSERT INTO {table} ({_COLUMNS}, updated_at) "
                    f"VALUES (%(scope)s, %(name)s, %(concurrency)s, 'declared', {self._d.now}) "
                    "ON CONFLICT (scope, name) DO UPDATE SET concurrency = excluded.concurrency, "
                    f"updated_at = excluded.updated_at WHERE {table}.source = 'declared' "
                    f"AND {table}.concurrency <> excluded.concurrency",
                    self._params(**limit.to_json()),
                )
            for name in unlimited:
                conn.execute(undeclare, {"name": name, "keep": ""})
            self._notify(conn)
        self._limits_seen = _UNSEEN

    def set_rate(self, scope: str, name: str, rate: int, period_ms: int) -> Rate:
        with self._write() as conn:
            row = conn.execute(
                f"INSERT INTO {self._d.table('rates')} ({_RATE_COLUMNS}, updated_at) "
                f"VALUES (%(scope)s, %(name)s, %(rate)s, %(period_ms)s, 'set', {self._d.now}) "
                "ON CONFLICT (scope, name) DO UPDATE SET rate = excluded.rate, "
                "period_ms = excluded.period_ms, source = 'set', "
                f"updated_at = excluded.updated_at RETURNING {_RATE_COLUMNS}",
                self._params(scope=scope, name=name, rate=rate, period_ms=period_ms),
            ).fetchone()
            self._notify(conn)
        self._limits_seen = _UNSEEN
        assert row is not None
        return _rate(row)

    def clear_rate(self, scope: str, name: str) -> Rate | None:
        with self._write() as conn:
            row = conn.execute(
                f"DELETE FROM {self._d.table('rates')} WHERE scope = %s AND name = %s "
                f"RETURNING {_RATE_COLUMNS}",
                (scope, name),
            ).fetchone()
            conn.execute(
                f"DELETE FROM {self._d.table('rate_starts')} WHERE scope = %s AND name = %s",
                (scope, name),
            )
            if row is not None:
                self._notify(conn)
        self._limits_seen = _UNSEEN
        return None if row is None else _rate(row)

    def rates(self) -> list[Rate]:
        with self._connection() as conn:
            rows = conn.execute(
                f"SELECT {_RATE_COLUMNS} FROM {self._d.table('rates')} ORDER BY scope, name"
            ).fetchall()
        return [_rate(row) for row in rows]

    def declare_rates(self, declared: Sequence[Rate], unrated: Sequence[str]) -> None:
        table = self._d.table("rates")
        undeclare = (
            f"DELETE FROM {table} WHERE source = 'declared' AND scope IN ('type', 'key') "
            "AND name = %(name)s AND scope <> %(keep)s"
        )
        with self._write() as conn:
            for rate in declared:
                conn.execute(undeclare, {"name": rate.name, "keep": rate.scope})
                conn.execute(
                    f"INSERT INTO {table} ({_RATE_COLUMNS}, updated_at) VALUES (%(scope)s, "
                    f"%(name)s, %(rate)s, %(period_ms)s, 'declared', {self._d.now}) "
                    "ON CONFLICT (scope, name) DO UPDATE SET rate = excluded.rate, "
                    "period_ms = excluded.period_ms, updated_at = excluded.updated_at "
                    f"WHERE {table}.source = 'declared' AND ({table}.rate <> excluded.rate "
                    f"OR {table}.period_ms <> excluded.period_ms)",
                    self._params(
                        scope=rate.scope, name=rate.name, rate=rate.rate, period_ms=rate.period_ms
                    ),
                )
            for name in unrated:
                conn.execute(undeclare, {"name": name, "keep": ""})
            conn.execute(_prune_gone_sql(self._d))  # the starts of the rates that went
            self._notify(conn)
        self._limits_seen = _UNSEEN

    def rate_use(self) -> dict[tuple[str, str], rate_limits.RateUse]:
        """Each rate limit's real starts in its current window (for a key limit, its keys
        at it) and how long a push holds it full."""
        with self._connection() as conn:
            limits = _claim_limits(self._d, conn)
            row = conn.execute(f"SELECT {self._d.now}", self._params()).fetchone()
            assert row is not None
            now = int(row[0])
            found = conn.execute(_use_sql(self._d), {"now": now}).fetchall()
        rows = [(s, n, k, int(used or 0), until) for s, n, k, used, until in found]
        return rate_limits.rate_use(limits.rates, rows, now)

    def push_rate(self, job_id: str, seconds: float) -> bool:
        """Hold the narrowest rate limit job `job_id` falls under full for `seconds`."""
        d = self._d
        with self._write() as conn:
            conn.execute(_LOCK, {"lock": _lock_name(d)})
            found = conn.execute(
                f"SELECT queue, type, limit_key, {d.now} FROM {d.table('jobs')} WHERE id = %(id)s",
                self._params(id=job_id),
            ).fetchone()
            if found is None:
                return False
            limits = _claim_limits(d, conn)
            target = push_target(limits.rates, found[0], found[1], found[2])
            if target is None:
                return False
            rate, period_ms = limits.rates[target[:2]]
            until = int(found[3]) + round(seconds * 1000)
            conn.execute(
                f"INSERT INTO {d.table('rate_starts')} (scope, name, key, at, n, held_until) "
                "VALUES (%s, %s, %s, %s, %s, %s)",
                (*target, until - period_ms, rate, until),
            )
        opens = self._rate_opens
        self._rate_opens = until if opens is None else min(opens, until)
        return True

    def held(self) -> dict[tuple[str, str], int]:
        """Claimed jobs per limited (scope, name); for a key limit, the keys at their limit."""
        with self._connection() as conn:
            caps = {
                (scope, name): int(cap)
                for scope, name, cap in conn.execute(
                    f"SELECT scope, name, concurrency FROM {self._d.table('limits')}"
                )
            }
            reads = _Reads(self._d, conn, {}, {})
            counts = {pair: n for pair, n in reads.held().items() if pair in caps}
            for (scope, name), cap in caps.items():
                if scope == "key":
                    keys = reads.held_keys(name)
                    counts[(scope, name)] = sum(1 for n in keys.values() if n >= cap)
        return counts
