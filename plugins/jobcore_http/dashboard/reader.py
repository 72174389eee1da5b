"""Reads behind the dashboard: SQL on the store's SQLite file, each bounded at 1M jobs.

List pages walk the primary key (or the `(status, id)` index) newest first and
stop after `limit` matches; filters no index serves (type, queue, worker,
search) check rows in chunks for at most a time budget per page and then
offer to continue below, so a page never scans the whole table. Counts for the overview come from
`overview.Snapshot`, not from here per request.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import apsw

from jobcore.models import Job
from jobcore.queue import Queue
from jobcore.storage.rows import row_to_job
from jobcore_http.dashboard.filters import JobFilter


@dataclass(slots=True)
class Claims:
    """One worker's live claims: how many, last heartbeat, latest lease end, a few of them."""

    worker: str
    count: int
    last_seen: int | None
    lease_until: int | None
    sample: list[Job] = field(default_factory=list)


def _like(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


class Reader:
    """Read-only SQL over the jobs table of the queue's SQLite store (one connection per thread)."""

    def __init__(self, queue: Queue) -> None:
        path = getattr(queue.storage, "path", None)
        if not isinstance(path, str):
            raise RuntimeError(
                "the dashboard reads SQLite stores; this store has no file path "
                f"({type(queue.storage).__name__})"
            )
        queue.storage.migrate()  # the file and its schema exist before the reader opens it
        self.queue = queue
        self.path = path
        self._local = threading.local()
        self._all: list[apsw.Connection] = []
        self._lock = threading.Lock()

    def conn(self) -> apsw.Connection:
        conn: apsw.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = apsw.Connection(self.path, flags=apsw.SQLITE_OPEN_READWRITE)
            conn.set_busy_timeout(5000)
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def close(self) -> None:
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
        self._local = threading.local()

    def rows(self, sql: str, params: dict[str, Any] | None = None) -> list[Any]:
        result: list[Any] = self.conn().execute(sql, params or {}).fetchall()
        return result

    # -- the jobs list ---------------------------------------------------------------

    @staticmethod
    def _where(flt: JobFilter, params: dict[str, Any]) -> str:
        """SQL conditions of the filter (without a leading AND), or `1`."""
        parts: list[str] = []
        if flt.statuses:
            names = []
            for index, status in enumerate(flt.statuses):
                params[f"s{index}"] = status
                names.append(f":s{index}")
            parts.append(f"status IN ({', '.join(names)})")
        for column, value in (("type", flt.type), ("queue", flt.queue), ("locked_by", flt.worker)):
            if value:
                params[column] = value
                parts.append(f"{column} = :{column}")
        if flt.q:  # as the hub's search: payload, error history, last error
            params["q_like"] = _like(flt.q)
            parts.append(
                "(payload LIKE :q_like ESCAPE '\\' "
                "OR coalesce(last_error, '') LIKE :q_like ESCAPE '\\' "
                "OR errors LIKE :q_like ESCAPE '\\')"
            )
        return " AND ".join(parts) or "1"

    def count(self, flt: JobFilter) -> int:
        """How many jobs match `flt` exactly (a full count: for confirmations, not for pages)."""
        params: dict[str, Any] = {}
        return int(
            self.rows(f"SELECT count(*) FROM jobs WHERE {self._where(flt, params)}", params)[0][0]
        )

    def ids(self, flt: JobFilter, *, batch: int = 500) -> Iterator[list[str]]:
        """Ids of every job matching `flt`, oldest first, in batches."""
        after = ""
        while True:
            params: dict[str, Any] = {"after": after, "batch": batch}
            where = self._where(flt, params)
            found = [
                row[0]
                for row in self.rows(
                    f"SELECT id FROM jobs WHERE id > :after AND {where} ORDER BY id LIMIT :batch",
                    params,
                )
            ]
            if not found:
                return
            yield found
            after = found[-1]

    def failures(self, *, batch: int = 2000) -> Iterator[list[tuple[str, str | None]]]:
        """`(id, last_error)` of every failed job, oldest first, in batches (the status index)."""
        after = ""
        while True:
            rows = self.rows(
                "SELECT id, last_error FROM jobs WHERE status = 'failed' AND id > :after "
                "ORDER BY id LIMIT :batch",
                {"after": after, "batch": batch},
            )
            if not rows:
                return
            yield [(job_id, error) for job_id, error in rows]
            after = rows[-1][0]

    # -- small live reads (partial indexes) ------------------------------------------------

    def claims(self, *, sample: int = 8) -> list[Claims]:
        """Who runs what now: per worker, its claim count and its `sample` oldest claims."""
        summary = {
            worker: Claims(worker or "?", n, seen, lease)
            for worker, n, seen, lease in self.rows(
                "SELECT locked_by, count(*), max(coalesce(heartbeat_at, claimed_at)), "
                "max(lease_expires_at) FROM jobs WHERE status = 'claimed' GROUP BY locked_by"
            )
        }
        for row in self.rows(
            "SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY locked_by ORDER BY "
            "claimed_at, id) AS nth FROM jobs WHERE status = 'claimed') WHERE nth <= :sample",
            {"sample": sample},
        ):
            job = row_to_job(row[:-1])
            summary[job.locked_by].sample.append(job)
        return list(summary.values())

    def stuck_count(self, now: int) -> int:
        """How many claimed jobs have an expired lease (read from the claimed rows only)."""
        return int(
            self.rows(
                "SELECT count(*) FROM jobs WHERE status = 'claimed' AND lease_expires_at < :now",
                {"now": now},
            )[0][0]
        )

    def stuck(self, now: int, *, limit: int = 100) -> list[Job]:
        """Claimed jobs whose lease expired (the sweep has not reclaimed them yet)."""
        return [
            row_to_job(row)
            for row in self.rows(
                "SELECT * FROM jobs WHERE status = 'claimed' AND lease_expires_at < :now "
                "ORDER BY lease_expires_at LIMIT :limit",
                {"now": now, "limit": limit},
            )
        ]
