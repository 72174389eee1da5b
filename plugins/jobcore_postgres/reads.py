"""The PostgreSQL backend's reads: jobs, stats and events (no locks taken)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

import psycopg

from jobcore.models import Event, Job
from jobcore.storage.base import Stats
from jobcore_postgres.event_order import events_after_sql, expand, newest_delivered_sql
from jobcore_postgres.held_back import HeldBackWatch
from jobcore_postgres.rows import event_data, row_to_job
from jobcore_postgres.statements import JOB_COLUMNS, Dialect

Conn = psycopg.Connection[tuple[Any, ...]]


def select_jobs(d: Dialect, where: str = "", tail: str = "") -> str:
    """`SELECT` of every job column (in `Job` field order) with `where` and `tail`."""
    return f"SELECT {', '.join(JOB_COLUMNS)} FROM {d.table('jobs')} {where} {tail}"


def filters(params: dict[str, Any], **given: Sequence[str]) -> str:
    """`AND column = ANY(...)` for each non-empty filter, its values put in `params`."""
    conds = []
    for column, values in given.items():
        if values:
            params[column] = list(values)
            conds.append(f"{column} = ANY(%({column})s::text[])")
    return "".join(f" AND {c}" for c in conds)


class PostgresReads:
    """Read methods of `PostgresStorage` (a mixin: it provides `_connection`, `_d`, `now`)."""

    _d: Dialect
    _connection: Callable[[], AbstractContextManager[Conn]]
    now: Callable[[], int]
    _params: Callable[..., dict[str, Any]]
    _held_back: HeldBackWatch
    rate_opens: Callable[[int], int | None]

    def next_due(self) -> int | None:
        with self._connection() as conn:
            row = conn.execute(
                f"SELECT min(run_at), {self._d.now} FROM {self._d.table('jobs')} "
                "WHERE status = 'scheduled'",
                self._params(),
            ).fetchone()
        assert row is not None
        due = None if row[0] is None else int(row[0])
        opens = self.rate_opens(int(row[1]))  # a full rate limit's window opens (DESIGN §16)
        return opens if due is None else due if opens is None else min(due, opens)

    def cancel_requested(self, worker: str) -> set[str]:
        with self._connection() as conn:
            rows = conn.execute(
                f"SELECT id FROM {self._d.table('jobs')} "
                "WHERE status = 'claimed' AND locked_by = %s AND cancel_requested",
                (worker,),
            ).fetchall()
        return {row[0] for row in rows}

    def get(self, job_id: str) -> Job | None:
        with self._connection() as conn:
            row = conn.execute(select_jobs(self._d, "WHERE id = %s"), (job_id,)).fetchone()
        return None if row is None else row_to_job(row)

    def list_jobs(
        self,
        *,
        statuses: Sequence[str] = (),
        types: Sequence[str] = (),
        queues: Sequence[str] = (),
        finished_after: int | None = None,
        limit: int = 100,
    ) -> list[Job]:
        params: dict[str, Any] = {"limit": limit}
        where = "WHERE true" + filters(params, status=statuses, type=types, queue=queues)
        if finished_after is not None:
            params["finished_after"] = finished_after
            where += " AND completed_at >= %(finished_after)s"
        with self._connection() as conn:
            rows = conn.execute(
                select_jobs(self._d, where, "ORDER BY id DESC LIMIT %(limit)s"), params
            ).fetchall()
        return [row_to_job(row) for row in rows]

    def failed_ids(self, types: Sequence[str] = ()) -> list[str]:
        params: dict[str, Any] = {}
        where = "WHERE status = 'failed'" + filters(params, type=types)
        with self._connection() as conn:
            rows = conn.execute(
                f"SELECT id FROM {self._d.table('jobs')} {where} ORDER BY id", params
            ).fetchall()
        return [row[0] for row in rows]

    def scan(
        self, *, statuses: Sequence[str] = (), types: Sequence[str] = (), batch: int = 500
    ) -> Iterator[Job]:
        after = ""
        while True:
            params: dict[str, Any] = {"after": after, "limit": batch}
            where = "WHERE id > %(after)s" + filters(params, status=statuses, type=types)
            with self._connection() as conn:
                rows = conn.execute(
                    select_jobs(self._d, where, "ORDER BY id LIMIT %(limit)s"), params
                ).fetchall()
            jobs = [row_to_job(row) for row in rows]
            yield from jobs
            if len(jobs) < batch:
                return
            after = jobs[-1].id

    def count_by_status(self) -> dict[str, int]:
        with self._connection() as conn:
            rows = conn.execute(
                f"SELECT status, count(*) FROM {self._d.table('jobs')} GROUP BY status"
            ).fetchall()
        return {status: int(n) for status, n in rows}

    def stats(self) -> Stats:
        jobs = self._d.table("jobs")
        now = self.now()
        stats = Stats()
        with self._connection() as conn:
            for type_name, status, count in conn.execute(
                f"SELECT type, status, count(*) FROM {jobs} GROUP BY type, status"
            ).fetchall():
                stats.counts[status] = stats.counts.get(status, 0) + int(count)
                stats.by_type.setdefault(type_name, {})[status] = int(count)
            stats.failures = [
                {"type": t, "error": error, "count": int(n)}
                for t, error, n in conn.execute(
                    f"SELECT type, coalesce(last_error, ''), count(*) FROM {jobs} "
                    "WHERE status = 'failed' GROUP BY type, last_error "
                    "ORDER BY count(*) DESC, type LIMIT 50"
                ).fetchall()
            ]
            stats.stuck = [
                row_to_job(row)
                for row in conn.execute(
                    select_jobs(
                        self._d,
                        "WHERE status = 'claimed' AND lease_expires_at < %s",
                        "ORDER BY lease_expires_at LIMIT 100",
                    ),
                    (now,),
                ).fetchall()
            ]
            for type_name, count, p50, p95 in conn.execute(
                "SELECT type, count(*), "
                "percentile_disc(0.5) WITHIN GROUP (ORDER BY completed_at - claimed_at), "
                "percentile_disc(0.95) WITHIN GROUP (ORDER BY completed_at - claimed_at) "
                f"FROM {jobs} WHERE status = 'completed' AND completed_at >= %s "
                "AND claimed_at IS NOT NULL GROUP BY type ORDER BY type",
                (now - 86_400_000,),
            ).fetchall():
                stats.durations[type_name] = {
                    "count": int(count),
                    "p50_ms": None if p50 is None else int(p50),
                    "p95_ms": None if p95 is None else int(p95),
                }
            since = now - 3_600_000
            row = conn.execute(
                f"SELECT (SELECT count(*) FROM {jobs} WHERE created_at >= %(s)s), "
                f"(SELECT count(*) FROM {jobs} WHERE status = 'completed' AND completed_at >= %(s)s), "
                f"(SELECT count(*) FROM {jobs} WHERE status = 'failed' AND completed_at >= %(s)s)",
                {"s": since},
            ).fetchone()
            assert row is not None
            stats.last_hour = {
                "enqueued": int(row[0]),
                "completed": int(row[1]),
                "failed": int(row[2]),
            }
            stats.duplicates = [
                {"type": t, "idempotency_key": key, "count": int(n)}
                for t, key, n in conn.execute(
                    f"SELECT type, idempotency_key, count(*) FROM {jobs} "
                    "WHERE idempotency_key IS NOT NULL GROUP BY type, idempotency_key "
                    "HAVING count(*) > 1 ORDER BY count(*) DESC LIMIT 50"
                ).fetchall()
            ]
        return stats

    def events_after(self, seq: int, limit: int = 1000) -> list[Event]:
        """Events after the event `seq` in delivery order (see `event_order`); a job
        event's data is its job's type and queue (while it exists). Now and then warns when
        events wait too long behind a transaction left open (`held_back`)."""
        with self._connection() as conn:
            rows = conn.execute(events_after_sql(self._d), {"seq": seq, "limit": limit}).fetchall()
            self._held_back.maybe_check(conn, self._d, self._params())
        return [
            Event(
                seq=int(e.seq),
                at=int(e.at),
                kind=e.kind,
                job_id=e.job_id,
                worker_id=e.worker_id,
                data=event_data(e.data, e.type, e.queue),
            )
            for e in expand(rows, seq, limit)
        ]

    def last_event_seq(self) -> int:
        """The newest event a reader may deliver now (a cursor `events_after` goes on from);
        like `events_after`, now and then warns of events held back too long."""
        with self._connection() as conn:
            row = conn.execute(newest_delivered_sql(self._d)).fetchone()
            self._held_back.maybe_check(conn, self._d, self._params())
        return 0 if row is None else int(row[0])
