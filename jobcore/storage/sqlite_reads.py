"""The SQLite backend's reads: jobs, stats and events. None of them takes the write lock."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import apsw

from jobcore.models import Event, Job
from jobcore.storage.base import Stats
from jobcore.storage.rows import row_to_job, rows_of
from jobcore.storage.sql import load_queries
from jobcore.storage.sqlite_errors import boundary

Q = load_queries("jobcore.storage", "queries.sql")


def in_filter(column: str, values: Sequence[str], prefix: str, params: dict[str, Any]) -> str:
    if not values:
        return ""
    names = []
    for index, value in enumerate(values):
        params[f"{prefix}{index}"] = value
        names.append(f":{prefix}{index}")
    return f" AND {column} IN ({', '.join(names)})"


class SQLiteReads:
    """Read methods of `SQLiteStorage` (a mixin: it provides `_conn`, `now` and the path)."""

    path: str
    busy_timeout_ms: int
    _conn: Callable[[], apsw.Connection]
    now: Callable[[], int]
    rate_opens: Callable[[int], int | None]

    @boundary
    def next_due(self) -> int | None:
        value = rows_of(self._conn(), Q["next_due"])[0][0]
        due = None if value is None else int(value)
        opens = self.rate_opens(self.now())  # a full rate limit's window opens (DESIGN §16)
        return opens if due is None else due if opens is None else min(due, opens)

    @boundary
    def cancel_requested(self, worker: str) -> set[str]:
        rows = rows_of(self._conn(), Q["cancel_requested"], {"worker": worker})
        return {row[0] for row in rows}

    @boundary
    def events_after(self, seq: int, limit: int = 1000) -> list[Event]:
        rows = rows_of(self._conn(), Q["events_after"], {"seq": seq, "limit": limit})
        return [
            Event(
                seq=seq,
                at=at,
                kind=kind,
                job_id=job_id,
                worker_id=worker_id,
                data=_event_data(data, type_name, queue),
            )
            for seq, at, kind, job_id, worker_id, data, type_name, queue in rows
        ]

    @boundary
    def last_event_seq(self) -> int:
        rows = rows_of(self._conn(), Q["last_event_seq"])
        return int(rows[0][0]) if rows and rows[0][0] is not None else 0

    @boundary
    def get(self, job_id: str) -> Job | None:
        rows = rows_of(self._conn(), Q["get_job"], {"id": job_id})
        return row_to_job(rows[0]) if rows else None

    @boundary
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
        filters = (
            in_filter("status", statuses, "s", params)
            + in_filter("type", types, "t", params)
            + in_filter("queue", queues, "q", params)
        )
        if finished_after is not None:
            params["finished_after"] = finished_after
            filters += " AND completed_at >= :finished_after"
        rows = rows_of(self._conn(), Q["list_jobs"].replace("{filters}", filters), params)
        return [row_to_job(row) for row in rows]

    @boundary
    def failed_ids(self, types: Sequence[str] = ()) -> list[str]:
        params: dict[str, Any] = {}
        sql = Q["failed_ids"].replace("{filters}", in_filter("type", types, "t", params))
        return [row[0] for row in rows_of(self._conn(), sql, params)]

    def scan(
        self, *, statuses: Sequence[str] = (), types: Sequence[str] = (), batch: int = 500
    ) -> Iterator[Job]:
        after = ""
        while True:
            jobs = self._scan_batch(after, statuses, types, batch)
            yield from jobs
            if len(jobs) < batch:
                return
            after = jobs[-1].id

    @boundary
    def _scan_batch(
        self, after: str, statuses: Sequence[str], types: Sequence[str], batch: int
    ) -> list[Job]:
        params: dict[str, Any] = {"after": after, "limit": batch}
        filters = in_filter("status", statuses, "s", params) + in_filter("type", types, "t", params)
        rows = rows_of(self._conn(), Q["scan_jobs"].replace("{filters}", filters), params)
        return [row_to_job(row) for row in rows]

    @boundary
    def count_by_status(self) -> dict[str, int]:
        return {status: n for status, n in rows_of(self._conn(), Q["count_by_status"])}

    @boundary
    def stats(self) -> Stats:
        conn = self._conn()
        now = self.now()
        stats = Stats()
        for type_name, status, count in rows_of(conn, Q["stats_counts"]):
            stats.counts[status] = stats.counts.get(status, 0) + count
            stats.by_type.setdefault(type_name, {})[status] = count
        stats.failures = [
            {"type": t, "error": error, "count": n}
            for t, error, n in rows_of(conn, Q["stats_failures"])
        ]
        stats.stuck = [row_to_job(row) for row in rows_of(conn, Q["stats_stuck"], {"now": now})]
        day_ago, since = now - 86_400_000, now - 3_600_000
        for type_name, count, p50, p95 in rows_of(conn, Q["stats_durations"], {"since": day_ago}):
            stats.durations[type_name] = {"count": count, "p50_ms": p50, "p95_ms": p95}
        enqueued, completed, failed = rows_of(conn, Q["stats_last_hour"], {"since": since})[0]
        stats.last_hour = {"enqueued": enqueued, "completed": completed, "failed": failed}
        stats.duplicates = [
            {"type": t, "idempotency_key": key, "count": n}
            for t, key, n in rows_of(conn, Q["stats_duplicates"])
        ]
        return stats


def _event_data(
    data: str | None, type_name: str | None, queue: str | None
) -> dict[str, Any] | None:
    """An event's data: what was stored with it, plus the job's type and queue if it exists."""
    value: dict[str, Any] | None = None
    if data is not None:
        decoded = json.loads(data)
        value = decoded if isinstance(decoded, dict) else {"value": decoded}
    if type_name is not None:
        value = {**(value or {}), "type": type_name, "queue": queue}
    return value
