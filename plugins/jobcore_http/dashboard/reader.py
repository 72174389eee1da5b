"""Reads behind the dashboard: SQL on the store's SQLite file, each bounded at 1M jobs.

List pages walk the primary key (or the `(status, id)` index) newest first and
stop after `limit` matches; filters no index serves (type, queue, worker,
search) look at most `window` rows per page and then offer to continue below,
so a page never scans the whole table. Counts for the overview come from
`overview.Snapshot`, not from here per request.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import apsw

from jobcore.models import Job
from jobcore.queue import Queue
from jobcore.storage.rows import row_to_job
from jobcore_http.dashboard.filters import JobFilter

WINDOW = 100_000
"""Rows a filtered page looks at before it offers to continue (bounds one request)."""


@dataclass(frozen=True, slots=True)
class Page:
    """One page of jobs, newest first.

    `next_cursor`: the id to continue below, or None at the end. `window_end`
    is set when the page stopped because it had looked at `WINDOW` rows without
    filling up: more matches may exist below that id.
    """

    jobs: list[Job]
    next_cursor: str | None
    window_end: str | None = None


def _like(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


class Reader:
    """Read-only SQL over the jobs table of the queue's SQLite store (one connection per thread)."""

    def __init__(self, queue: Queue, *, window: int = WINDOW) -> None:
        path = getattr(queue.storage, "path", None)
        if not isinstance(path, str):
            raise RuntimeError(
                "the dashboard reads SQLite stores; this store has no file path "
                f"({type(queue.storage).__name__})"
            )
        queue.storage.migrate()  # the file and its schema exist before the reader opens it
        self.queue = queue
        self.path = path
        self.window = window
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
    def _where(flt: JobFilter, params: dict[str, Any], *, skip_status: bool = False) -> str:
        """SQL conditions of the filter (without a leading AND), or `1`."""
        parts: list[str] = []
        if flt.statuses and not skip_status:
            names = []
            for index, status in enumerate(flt.statuses):
                params[f"s{index}"] = status
                names.append(f":s{index}")
            parts.append(f"status IN ({', '.join(names)})")
        for column, value in (("type", flt.type), ("queue", flt.queue), ("locked_by", flt.worker)):
            if value:
                params[column] = value
                parts.append(f"{column} = :{column}")
        if flt.q:
            params["q_like"] = _like(flt.q)
            params["q_exact"] = flt.q
            parts.append(
                "(id = :q_exact OR payload LIKE :q_like ESCAPE '\\' "
                "OR coalesce(last_error, '') LIKE :q_like ESCAPE '\\' "
                "OR errors LIKE :q_like ESCAPE '\\')"
            )
        return " AND ".join(parts) or "1"

    @staticmethod
    def _base(flt: JobFilter, params: dict[str, Any], cursor: str | None) -> tuple[str, bool]:
        """The ordered row source: one status walks `(status, id)`, else the primary key.

        Answers the SQL and whether it already applied the status filter.
        """
        params["cursor"] = cursor if cursor is not None else "\U0010ffff"
        if len(flt.statuses) == 1:
            params["only_status"] = flt.statuses[0]
            return (
                "SELECT * FROM jobs WHERE status = :only_status AND id < :cursor ORDER BY id DESC",
                True,
            )
        return "SELECT * FROM jobs WHERE id < :cursor ORDER BY id DESC", False

    def page(self, flt: JobFilter, *, cursor: str | None = None, limit: int = 50) -> Page:
        """Up to `limit` jobs matching `flt` below `cursor`, newest first."""
        source: dict[str, Any] = {}
        base, status_done = self._base(flt, source, cursor)
        matching: dict[str, Any] = {}
        rest = self._where(flt, matching, skip_status=status_done)
        if rest == "1":
            return self._paged(
                self.rows(f"{base} LIMIT :limit", {**source, "limit": limit + 1}), limit
            )
        window = {"window": self.window}
        rows = self.rows(
            f"SELECT * FROM ({base} LIMIT :window) WHERE {rest} LIMIT :limit",
            {**source, **matching, **window, "limit": limit + 1},
        )
        if len(rows) > limit:
            return self._paged(rows, limit)
        ids_only = base.replace("SELECT *", "SELECT id", 1)
        seen, lowest = self.rows(
            f"SELECT count(*), min(id) FROM ({ids_only} LIMIT :window)", {**source, **window}
        )[0]
        if seen < self.window:
            return self._paged(rows, limit)
        return Page([row_to_job(row) for row in rows], None, window_end=str(lowest))

    @staticmethod
    def _paged(rows: list[Any], limit: int) -> Page:
        jobs = [row_to_job(row) for row in rows[:limit]]
        more = len(rows) > limit
        return Page(jobs, jobs[-1].id if more and jobs else None)

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

    # -- small live reads (partial indexes) ------------------------------------------------

    def claims(self) -> list[Job]:
        """Every claimed job (the `jobs_leases` partial index): who runs what right now."""
        return [
            row_to_job(row)
            for row in self.rows(
                "SELECT * FROM jobs INDEXED BY jobs_leases WHERE status = 'claimed' "
                "ORDER BY lease_expires_at LIMIT 5000"
            )
        ]
