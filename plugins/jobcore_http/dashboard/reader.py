"""Reads behind the dashboard: SQL on the store's SQLite file, each bounded at 1M jobs.

List pages walk the primary key (or the `(status, id)` index) newest first and
stop after `limit` matches; filters no index serves (type, queue, worker,
search) check rows in chunks for at most a time budget per page and then
offer to continue below, so a page never scans the whole table. Counts for the overview come from
`overview.Snapshot`, not from here per request.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from jobcore.models import Job
from jobcore.queue import Queue
from jobcore_http.dashboard.filters import JobFilter
from jobcore_http.dashboard.sql import PostgresSql, sql_for
from jobcore_http.store import HubStore


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
    """Read-only SQL over the store's jobs table; whole jobs come from the hub's store."""

    def __init__(self, queue: Queue, store: HubStore) -> None:
        queue.storage.migrate()  # the database and its schema exist before the reader opens it
        self.queue = queue
        self.store = store
        self.sql = sql_for(queue.storage)

    def close(self) -> None:
        self.sql.close()

    def rows(self, sql: str, params: dict[str, Any] | None = None) -> list[Any]:
        return self.sql.rows(sql, params)

    def jobs(self, ids: list[str]) -> list[Job]:
        """These jobs, in this order (those that still exist)."""
        found = self.store.jobs_by_id(ids)
        return [found[job_id] for job_id in ids if job_id in found]

    def _where(self, flt: JobFilter, params: dict[str, Any]) -> str:
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
            params["q_like"] = _like(flt.q.lower())
            # payload and errors are JSON text, ASCII-escaped (`caf\\u00e9`) except
            # PostgreSQL's jsonb errors, which escape only `"` and `\\`
            ascii_errors = not isinstance(self.sql, PostgresSql)
            params["q_payload"] = _like(json.dumps(flt.q.lower())[1:-1])
            params["q_errors"] = _like(json.dumps(flt.q.lower(), ensure_ascii=ascii_errors)[1:-1])
            parts.append(
                "(lower(CAST(payload AS TEXT)) LIKE :q_payload ESCAPE '\\' "
                "OR lower(coalesce(last_error, '')) LIKE :q_like ESCAPE '\\' "
                "OR lower(CAST(errors AS TEXT)) LIKE :q_errors ESCAPE '\\')"
            )
        return " AND ".join(parts) or "1"

    def count(self, flt: JobFilter) -> int:
        """How many jobs match `flt` exactly (a full count: for confirmations, not for pages)."""
        params: dict[str, Any] = {}
        return int(
            self.rows(f"SELECT count(*) FROM jobs WHERE {self._where(flt, params)}", params)[0][0]
        )

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
        sampled = [
            job_id
            for (job_id,) in self.rows(
                "SELECT id FROM (SELECT id, row_number() OVER (PARTITION BY locked_by ORDER BY "
                "claimed_at, id) AS nth FROM jobs WHERE status = 'claimed') AS c "
                "WHERE nth <= :sample",
                {"sample": sample},
            )
        ]
        for job in self.jobs(sampled):
            held = summary.get(job.locked_by)
            if held is not None:
                held.sample.append(job)
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
        return self.jobs(
            [
                job_id
                for (job_id,) in self.rows(
                    "SELECT id FROM jobs WHERE status = 'claimed' AND lease_expires_at < :now "
                    "ORDER BY lease_expires_at LIMIT :limit",
                    {"now": now, "limit": limit},
                )
            ]
        )
