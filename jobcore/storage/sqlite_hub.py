"""`SQLiteHubStore`: the hub's state (`jobcore.storage.hub_state.HubStore`) in the jobs
database file.

Tables `hub_tokens`, `hub_workers`, created by the hub's own idempotent migrations,
recorded in `hub_migrations`; on connections of its own (one per thread).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import apsw

from jobcore.errors import IllegalTransition
from jobcore.models import Job
from jobcore.storage.hub_state import (
    LIMITED_HASH,
    TOKEN_COLUMNS,
    JobFilter,
    Page,
    TokenRecord,
    WorkerRecord,
)
from jobcore.storage.rows import row_to_job
from jobcore.storage.sqlite_connect import open_existing
from jobcore.storage.sqlite_errors import boundary, storage_error
from jobcore.storage.sqlite_reads import in_filter

log = logging.getLogger("jobcore.http.store")

_WINDOW = 5000  # most ids examined per step of a filtered search
_FIRST_WINDOW = 1  # ids examined by the first step (it always completes: progress)


_MIGRATIONS: tuple[tuple[str, str], ...] = (
    (
        "hub_tokens",
        """
        CREATE TABLE IF NOT EXISTS hub_tokens (
            id         INTEGER PRIMARY KEY,
            name       TEXT NOT NULL,
            hash       TEXT NOT NULL UNIQUE,
            scope      TEXT NOT NULL CHECK (scope IN ('read', 'produce', 'agent', 'admin')),
            agent_id   TEXT,
            created_at INTEGER NOT NULL,
            revoked_at INTEGER
        );
        CREATE UNIQUE INDEX IF NOT EXISTS hub_tokens_active_name
            ON hub_tokens (name) WHERE revoked_at IS NULL;
        """,
    ),
    (
        "hub_workers",
        """
        CREATE TABLE IF NOT EXISTS hub_workers (
            worker_id     TEXT PRIMARY KEY,
            name          TEXT,
            cores         INTEGER,
            ram_gb        REAL,
            tags          TEXT NOT NULL DEFAULT '[]',
            types         TEXT NOT NULL DEFAULT '[]',
            registered_at INTEGER NOT NULL,
            last_seen     INTEGER NOT NULL,
            lost_at       INTEGER,
            drain         INTEGER NOT NULL DEFAULT 0
        );
        """,
    ),
    (
        # tokens limited to job types and queues (JSON arrays; NULL: any, as every older token)
        "hub_tokens_limits",
        """
        ALTER TABLE hub_tokens ADD COLUMN types TEXT;
        ALTER TABLE hub_tokens ADD COLUMN queues TEXT;
        """,
    ),
)


def _newest(columns: str, statuses: int, condition: str, limit: str) -> str:
    """The newest rows by id with one of `statuses` (params s0, s1, …): one index walk per
    status, merged, so no sort of every matching row."""
    if statuses <= 1:
        only = " AND status = :s0" if statuses else ""
        return f"SELECT {columns} FROM jobs WHERE 1 = 1{only}{condition} ORDER BY id DESC LIMIT :{limit}"
    parts = [
        f"SELECT * FROM (SELECT {columns} FROM jobs WHERE status = :s{index}{condition}"
        f" ORDER BY id DESC LIMIT :{limit})"
        for index in range(statuses)
    ]
    return " UNION ALL ".join(parts) + f" ORDER BY id DESC LIMIT :{limit}"


def _like(text: str) -> str:
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


class SQLiteHubStore:
    """`HubStore` in the jobs database file, on connections of its own (one per thread)."""

    def __init__(self, path: str, *, busy_timeout_ms: int = 30_000) -> None:
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        self._local = threading.local()
        self._all: weakref.WeakSet[apsw.Connection] = (
            weakref.WeakSet()
        )  # a finished thread's closes
        self._lock = threading.Lock()

    def _conn(self) -> apsw.Connection:
        conn: apsw.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            try:
                conn = open_existing(self.path)
                conn.set_busy_timeout(self.busy_timeout_ms)
            except apsw.Error as exc:
                raise storage_error(exc, self.path, self.busy_timeout_ms) from None
            self._local.conn = conn
            with self._lock:
                self._all.add(conn)
        return conn

    @contextmanager
    def _write(self) -> Iterator[apsw.Connection]:
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _rows(self, sql: str, params: Any = None) -> list[Any]:
        rows: list[Any] = self._conn().execute(sql, params).fetchall()
        return rows

    @boundary
    def migrate(self) -> None:
        exists = self._rows("SELECT 1 FROM sqlite_master WHERE name = 'hub_migrations'")
        done = (
            {row[0] for row in self._rows("SELECT name FROM hub_migrations")} if exists else set()
        )
        if all(name in done for name, _ in _MIGRATIONS):
            return
        with self._write() as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS hub_migrations "
                "(name TEXT PRIMARY KEY, applied_at INTEGER NOT NULL)"
            )
            done = {row[0] for row in conn.execute("SELECT name FROM hub_migrations")}
            for name, script in _MIGRATIONS:
                if name not in done:
                    log.info("hub migration %s", name)
                    conn.execute(script)
                    conn.execute(
                        "INSERT INTO hub_migrations VALUES (?, CAST(unixepoch('subsec') * 1000 AS INTEGER))",
                        (name,),
                    )

    def close(self) -> None:
        with self._lock:
            conns, self._all = list(self._all), weakref.WeakSet()
        for conn in conns:
            with contextlib.suppress(apsw.Error):
                conn.close(True)
        self._local = threading.local()

    @boundary
    def ping(self) -> None:
        self._rows("SELECT 1 FROM hub_migrations LIMIT 1")

    # -- tokens ------------------------------------------------------------------

    @boundary
    def add_token(self, record: TokenRecord) -> None:
        try:
            with self._write() as conn:
                conn.execute(
                    "INSERT INTO hub_tokens (name, hash, scope, agent_id, created_at, types, "
                    "queues) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        record.name,
                        record.hash,
                        record.scope,
                        record.agent_id,
                        record.created_at,
                        *record.limits.stored(),
                    ),
                )
        except apsw.ConstraintError:
            raise IllegalTransition(
                f"a token named {record.name!r} exists; revoke it first or choose another name"
            ) from None

    @boundary
    def token_by_hash(self, digest: str) -> TokenRecord | None:
        rows = self._rows(
            f"SELECT {TOKEN_COLUMNS} FROM hub_tokens WHERE hash IN (?, ?) AND revoked_at IS NULL",
            (digest, LIMITED_HASH + digest),
        )
        return TokenRecord.from_row(rows[0]) if rows else None

    @boundary
    def list_tokens(self) -> list[TokenRecord]:
        rows = self._rows(f"SELECT {TOKEN_COLUMNS} FROM hub_tokens ORDER BY id")
        return [TokenRecord.from_row(row) for row in rows]

    @boundary
    def revoke_token(self, name: str, now: int) -> bool:
        with self._write() as conn:
            conn.execute(
                "UPDATE hub_tokens SET revoked_at = ? WHERE name = ? AND revoked_at IS NULL",
                (now, name),
            )
            return bool(conn.changes())

    # -- workers -----------------------------------------------------------------

    @boundary
    def upsert_worker(self, record: WorkerRecord) -> bool:
        with self._write() as conn:
            known = conn.execute(
                "SELECT 1 FROM hub_workers WHERE worker_id = ?", (record.worker_id,)
            ).fetchall()
            conn.execute(
                """
                INSERT INTO hub_workers (worker_id, name, cores, ram_gb, tags, types,
                                         registered_at, last_seen, lost_at)
                VALUES (:id, :name, :cores, :ram, :tags, :types, :now, :now, NULL)
                ON CONFLICT (worker_id) DO UPDATE SET
                    name = excluded.name, cores = excluded.cores, ram_gb = excluded.ram_gb,
                    tags = excluded.tags, types = excluded.types,
                    registered_at = excluded.registered_at, last_seen = excluded.last_seen,
                    lost_at = NULL, drain = 0
                """,
                {
                    "id": record.worker_id,
                    "name": record.name,
                    "cores": record.cores,
                    "ram": record.ram_gb,
                    "tags": json.dumps(record.tags),
                    "types": json.dumps(record.types),
                    "now": record.registered_at,
                },
            )
        return not known

    @boundary
    def touch_workers(self, seen: dict[str, int]) -> list[str]:
        if not seen:
            return []
        back: list[str] = []
        with self._write() as conn:
            for worker_id, at in seen.items():
                rows = conn.execute(
                    "SELECT lost_at FROM hub_workers WHERE worker_id = ?", (worker_id,)
                ).fetchall()
                if not rows:
                    conn.execute(
                        "INSERT INTO hub_workers (worker_id, registered_at, last_seen) "
                        "VALUES (?, ?, ?)",
                        (worker_id, at, at),
                    )
                    continue
                if rows[0][0] is not None:
                    back.append(worker_id)
                conn.execute(
                    "UPDATE hub_workers SET last_seen = max(last_seen, ?), lost_at = NULL "
                    "WHERE worker_id = ?",
                    (at, worker_id),
                )
        return back

    @boundary
    def set_drain(self, worker_id: str, drain: bool) -> bool:
        with self._write() as conn:
            conn.execute(
                "UPDATE hub_workers SET drain = ? WHERE worker_id = ?", (int(drain), worker_id)
            )
            return bool(conn.changes())

    @boundary
    def mark_lost(self, before: int, now: int) -> list[str]:
        with self._write() as conn:
            rows = conn.execute(
                "UPDATE hub_workers SET lost_at = ? WHERE lost_at IS NULL AND last_seen < ? "
                "RETURNING worker_id",
                (now, before),
            ).fetchall()
        return [str(row[0]) for row in rows]

    @boundary
    def list_workers(self) -> list[WorkerRecord]:
        rows = self._rows(
            "SELECT worker_id, name, cores, ram_gb, tags, types, registered_at, last_seen, "
            "lost_at, drain FROM hub_workers ORDER BY worker_id"
        )
        return [
            WorkerRecord(
                worker_id=row[0],
                name=row[1],
                cores=row[2],
                ram_gb=row[3],
                tags=json.loads(row[4]),
                types=json.loads(row[5]),
                registered_at=row[6],
                last_seen=row[7],
                lost_at=row[8],
                drain=bool(row[9]),
            )
            for row in rows
        ]

    # -- jobs ----------------------------------------------------------------------

    @boundary
    def search_jobs(
        self, where: JobFilter, *, before: str | None, limit: int, budget_ms: int = 200
    ) -> Page:
        params: dict[str, Any] = {}
        for index, value in enumerate(where.statuses):
            params[f"s{index}"] = value
        statuses = len(where.statuses)
        status = in_filter("status", where.statuses, "s", params)
        rest = in_filter("type", where.types, "t", params) + in_filter(
            "queue", where.queues, "q", params
        )
        if where.worker is not None:
            params["worker"] = where.worker
            rest += " AND locked_by = :worker"
        if where.q:
            params["like"] = _like(where.q)
            # payload and errors are JSON text, stored ASCII-escaped: search them for the
            # query as JSON writes it (`café` is `caf\\u00e9` there, `"` is `\\"`)
            params["like_json"] = _like(json.dumps(where.q)[1:-1])
            rest += (
                " AND (payload LIKE :like_json ESCAPE '\\' OR errors LIKE :like_json ESCAPE '\\'"
                " OR coalesce(last_error, '') LIKE :like ESCAPE '\\')"
            )
        below = " AND id < :before" if before is not None else ""
        params["before"] = before
        if not rest:  # ids (and statuses) only: one indexed read
            params["limit"] = limit + 1
            rows = self._rows(_newest("*", statuses, below, "limit"), params)
            jobs = [row_to_job(row) for row in rows]
            more = len(jobs) > limit
            return Page(jobs[:limit], jobs[limit - 1].id if more else None)
        # other filters: walk down the ids in windows, within a time budget. Windows start
        # small and grow while they are quick; a window still running at the deadline is
        # stopped inside the scan (a progress handler) and the page ends above it
        deadline = time.monotonic() + budget_ms / 1000
        found: list[Job] = []
        window = _FIRST_WINDOW
        first = True
        while True:
            params["window"] = window
            low_rows = self._rows(
                f"SELECT min(id), count(*) FROM ({_newest('id', statuses, below, 'window')})",
                params,
            )
            low, count = low_rows[0]
            if not count:
                return Page(found[:limit], None)
            params["low"] = low
            params["limit"] = limit + 1 - len(found)
            started = time.monotonic()
            sql = (
                f"SELECT * FROM jobs WHERE id >= :low{below}{status}{rest}"
                " ORDER BY id DESC LIMIT :limit"
            )
            # the first window (one id) always completes: every page makes progress
            window_rows = (
                self._rows(sql, params) if first else self._rows_until(sql, params, deadline)
            )
            if window_rows is None:  # stopped at the deadline: go on from this window's top
                return Page(found, params["before"])
            first = False
            found.extend(row_to_job(row) for row in window_rows)
            if len(found) > limit:
                return Page(found[:limit], found[limit - 1].id)
            if count < window:
                return Page(found, None)
            params["before"] = low
            below = " AND id < :before"
            now = time.monotonic()
            if now >= deadline:
                return Page(found, low)  # go on from here on the next page
            if (now - started) * 4 < deadline - now:
                window = min(window * 2, _WINDOW)

    def _rows_until(self, sql: str, params: Any, deadline: float) -> list[Any] | None:
        """`_rows`, or None when the statement was still running at `deadline` (stopped
        inside its scan by a progress handler, not only between statements)."""
        conn = self._conn()

        def late() -> bool:
            return time.monotonic() >= deadline

        conn.set_progress_handler(late, 1000)
        try:
            return self._rows(sql, params)
        except apsw.InterruptError:
            return None
        finally:
            conn.set_progress_handler(None)

    @boundary
    def jobs_by_id(self, ids: Sequence[str]) -> dict[str, Job]:
        if not ids:
            return {}
        params: dict[str, Any] = {}
        sql = "SELECT * FROM jobs WHERE 1 = 1" + in_filter(
            "id", list(dict.fromkeys(ids)), "i", params
        )
        return {job.id: job for job in (row_to_job(row) for row in self._rows(sql, params))}

    @boundary
    def claims_by_worker(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for worker, job_id in self._rows(
            "SELECT locked_by, id FROM jobs INDEXED BY jobs_leases WHERE status = 'claimed'"
        ):
            out.setdefault(worker, []).append(job_id)
        return out

    @boundary
    def overdue_claims(self, now: int) -> list[Job]:
        rows = self._rows(
            "SELECT * FROM jobs INDEXED BY jobs_leases WHERE status = 'claimed'"
            " AND timeout_ms IS NOT NULL AND coalesce(started_at, claimed_at) + timeout_ms < ?",
            (now,),
        )
        return [row_to_job(row) for row in rows]
