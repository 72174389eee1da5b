"""The hub's own persistent state, behind a small interface a backend can implement.

`HubStore` keeps tokens and the workers registry, and answers the job
listing the API needs (filters, search, keyset pages). `SQLiteHubStore` keeps
them in the jobs database itself (tables `hub_tokens`, `hub_workers`, created
by the hub's own idempotent migrations, recorded in `hub_migrations`). Another
backend provides its own by giving its storage object a method
`hub_store() -> HubStore` (see /work/plan/CONTRACT_CHANGES.md).
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import apsw

from jobcore.errors import IllegalTransition, StorageError
from jobcore.models import Job
from jobcore.storage.rows import row_to_job
from jobcore.storage.sqlite_errors import boundary, storage_error
from jobcore_http.grants import Limits

log = logging.getLogger("jobcore.http.store")


LIMITED_HASH = "limited:"
"""Prefix of a limited token's stored hash. A hub older than limits looks a token up by its
bare SHA-256, so it finds no limited token (401) instead of granting it every type and
queue: the case of an old hub still running, or started again, on an upgraded store."""


def stored_hash(digest: str, limits: Limits) -> str:
    """The hash column of a new token whose SHA-256 is `digest`."""
    return LIMITED_HASH + digest if limits.limited else digest


@dataclass(frozen=True, slots=True)
class TokenRecord:
    """A stored token: never the token itself, only its SHA-256 (`stored_hash`)."""

    name: str
    hash: str
    scope: str
    agent_id: str | None
    created_at: int
    revoked_at: int | None = None
    types: tuple[str, ...] | None = None  # job types it may use; None: any
    queues: tuple[str, ...] | None = None  # queues it may use; None: any

    @property
    def limits(self) -> Limits:
        return Limits(self.types, self.queues)

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> TokenRecord:
        """From `TOKEN_COLUMNS` as stored (limits as JSON text or decoded lists)."""
        limits = Limits.from_stored(row[6], row[7])
        name, digest, scope, agent_id, created_at, revoked_at = row[:6]
        if str(digest).startswith(LIMITED_HASH) and not limits.limited:
            limits = Limits((), ())  # marked limited, its limits lost: nothing, never any
        return cls(
            name, digest, scope, agent_id, created_at, revoked_at, limits.types, limits.queues
        )

    def matches(self, digest: str) -> bool:
        """Whether this is the token whose SHA-256 hex is `digest` (constant time)."""
        return hmac.compare_digest(self.hash.removeprefix(LIMITED_HASH).encode(), digest.encode())

    def to_json(self) -> dict[str, Any]:
        from jobcore.timeutil import iso

        return {
            "name": self.name,
            "scope": self.scope,
            "agent_id": self.agent_id,
            "types": None if self.types is None else list(self.types),
            "queues": None if self.queues is None else list(self.queues),
            "created_at": iso(self.created_at),
            "revoked_at": iso(self.revoked_at),
        }


TOKEN_COLUMNS = "name, hash, scope, agent_id, created_at, revoked_at, types, queues"


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    """A registered agent: its capabilities and when the hub last heard from it."""

    worker_id: str
    name: str | None = None
    cores: int | None = None
    ram_gb: float | None = None
    tags: list[str] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    registered_at: int = 0
    last_seen: int = 0
    lost_at: int | None = None
    drain: bool = False


@dataclass(frozen=True, slots=True)
class JobFilter:
    """The filters of `GET /api/jobs` and the bulk routes; empty means any."""

    statuses: tuple[str, ...] = ()
    types: tuple[str, ...] = ()
    queues: tuple[str, ...] = ()
    worker: str | None = None
    q: str | None = None  # substring of the payload or the errors


@dataclass(frozen=True, slots=True)
class Page:
    """Jobs newest first, and where the next page starts (None: nothing further)."""

    jobs: list[Job]
    next_cursor: str | None


MAX_QUERY_CHARS = 200
"""Longest search text `q`: a LIKE compares it at every position of each payload (up to
`max_payload_bytes`), one row at a time, so its length bounds the cost of a row."""

_WINDOW = 5000  # most ids examined per step of a filtered search
_FIRST_WINDOW = 1  # ids examined by the first step (it always completes: progress)


class HubStore(Protocol):
    """What the hub persists besides jobs. Every method is safe from any thread."""

    def migrate(self) -> None:
        """Create the hub's tables if missing (idempotent; writes only when there is work)."""

    def close(self) -> None: ...

    def ping(self) -> None:
        """Raise `StorageError` unless the store answers a trivial read."""

    # tokens
    def add_token(self, record: TokenRecord) -> None:
        """Store a new token; `IllegalTransition` if an active token has that name."""

    def token_by_hash(self, digest: str) -> TokenRecord | None:
        """The active (not revoked) token with this SHA-256 (bare or `LIMITED_HASH`), or None."""

    def list_tokens(self) -> list[TokenRecord]: ...

    def revoke_token(self, name: str, now: int) -> bool:
        """Revoke the active token `name`; False if there is none."""

    # workers
    def upsert_worker(self, record: WorkerRecord) -> bool:
        """Insert or update a worker's capabilities; True if it was not known before."""

    def touch_workers(self, seen: dict[str, int]) -> list[str]:
        """Record last-seen times (creating unknown workers); returns ids that were lost."""

    def set_drain(self, worker_id: str, drain: bool) -> bool:
        """Ask a worker to drain (or not); False if the worker is unknown."""

    def mark_lost(self, before: int, now: int) -> list[str]:
        """Mark workers silent since before `before` lost; returns those newly marked."""

    def list_workers(self) -> list[WorkerRecord]: ...

    # jobs (read only)
    def search_jobs(
        self, where: JobFilter, *, before: str | None, limit: int, budget_ms: int = 200
    ) -> Page:
        """Up to `limit` matching jobs newest first (by id), ids below `before` only.

        Keyset pages: `next_cursor` continues below the last job, or below the last id
        examined when `budget_ms` ran out first (a page may then hold fewer jobs).
        """

    def jobs_by_id(self, ids: Sequence[str]) -> dict[str, Job]: ...

    def claims_by_worker(self) -> dict[str, list[str]]:
        """Ids of claimed jobs, by the worker holding them."""

    def overdue_claims(self, now: int) -> list[Job]:
        """Claimed jobs whose attempt (from start, else claim) has run past `timeout`."""


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


def _in(column: str, values: Sequence[str], prefix: str, params: dict[str, Any]) -> str:
    if not values:
        return ""
    names = []
    for index, value in enumerate(values):
        params[f"{prefix}{index}"] = value
        names.append(f":{prefix}{index}")
    return f" AND {column} IN ({', '.join(names)})"


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
                conn = apsw.Connection(self.path, flags=apsw.SQLITE_OPEN_READWRITE)
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
        status = _in("status", where.statuses, "s", params)
        rest = _in("type", where.types, "t", params) + _in("queue", where.queues, "q", params)
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
        sql = "SELECT * FROM jobs WHERE 1 = 1" + _in("id", list(dict.fromkeys(ids)), "i", params)
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


def hub_store_for(storage: Any) -> HubStore:
    """The `HubStore` beside `storage`: its own `hub_store()` if it has one, else SQLite's."""
    storage.migrate()  # the jobs schema (and the database) first
    factory = getattr(storage, "hub_store", None)
    if callable(factory):
        store: HubStore = factory()
        return store
    path = getattr(storage, "path", None)
    if not isinstance(path, str):
        raise StorageError(
            f"the hub cannot keep tokens and workers in {type(storage).__name__}; "
            "its backend provides no hub_store()"
        )
    return SQLiteHubStore(path, busy_timeout_ms=getattr(storage, "busy_timeout_ms", 30_000))
