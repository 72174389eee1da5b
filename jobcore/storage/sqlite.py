"""The built-in storage backend: SQLite through APSW, one connection per thread."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw

from jobcore.errors import IllegalTransition, StorageError
from jobcore.models import (
    Cancelled,
    Completed,
    Failed,
    Job,
    Lease,
    NewJob,
    Outcome,
    Released,
    Retrying,
    compact_json,
)
from jobcore.storage.base import Inserted, Recorded, Stats, Swept
from jobcore.storage.migrations import MIGRATIONS, SCHEMA_VERSION
from jobcore.storage.rows import after_transition, insert_values, new_row, row_to_job, rows_of
from jobcore.storage.sql import load_queries

log = logging.getLogger("jobcore.storage")

Q = load_queries("jobcore.storage", "queries.sql")

LEASE_EXPIRED = "lease expired"

_INSERT = Q["insert_job"]  # no read-back: `new_row` builds the inserted Job


def sqlite_path(url: str) -> str | None:
    """The file path of a `sqlite:` URL or plain path; None for other URL schemes."""
    if url.startswith("sqlite:"):
        rest = url[len("sqlite:") :]
        return rest[2:] if rest.startswith("//") else rest
    if "://" in url:
        return None
    return url


def _in(column: str, values: Sequence[str], prefix: str, params: dict[str, Any]) -> str:
    if not values:
        return ""
    names = []
    for index, value in enumerate(values):
        params[f"{prefix}{index}"] = value
        names.append(f":{prefix}{index}")
    return f" AND {column} IN ({', '.join(names)})"


@dataclass
class _ThreadState:
    conn: apsw.Connection
    depth: int = 0
    callbacks: list[Callable[[], None]] = field(default_factory=list)
    data_version: int | None = None


class SQLiteStorage:
    """Jobs in one SQLite file in WAL mode; every write is an explicit BEGIN IMMEDIATE."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "FULL",
        busy_timeout: float = 30.0,
        create: bool = True,
    ) -> None:
        self.path = str(path)
        if self.path in ("", ":memory:") or self.path.startswith("file::memory:"):
            raise StorageError(
                "an in-memory database cannot be shared by worker threads; give a file path"
            )
        if synchronous.upper() not in ("FULL", "NORMAL", "EXTRA", "OFF"):
            raise StorageError(f"synchronous must be FULL, NORMAL or EXTRA, not {synchronous!r}")
        self.synchronous = synchronous.upper()
        self.busy_timeout_ms = int(busy_timeout * 1000)
        self._create = create
        self._local = threading.local()
        self._all: list[apsw.Connection] = []
        self._all_lock = threading.Lock()
        self._migrated = False
        self._wake_key: str | None = None
        self._check_location()

    @property
    def wake_key(self) -> str:
        """Identifies the database for in-process wake-ups."""
        if self._wake_key is None:
            self._wake_key = os.path.realpath(self.path)
        return self._wake_key

    # -- connections ---------------------------------------------------------------

    def _check_location(self) -> None:
        target = Path(self.path)
        folder = target.parent if str(target.parent) else Path(".")
        if not folder.is_dir():
            raise StorageError(
                f"cannot open database {self.path}: folder {folder} does not exist; "
                "create it or choose another --db"
            )
        if target.exists():
            if not target.is_file():
                raise StorageError(f"cannot open database {self.path}: it is not a file")
            with open(target, "rb") as handle:
                header = handle.read(16)
            if header and header != b"SQLite format 3\x00":
                raise StorageError(
                    f"{self.path} is not a SQLite database; choose another --db or move it away"
                )
        elif not self._create:
            raise StorageError(
                f"database {self.path} does not exist; enqueue a job or run a worker to create "
                "it, or point --db / JOBCORE_DB at an existing one"
            )
        if not os.access(folder, os.W_OK | os.X_OK) or (
            target.exists() and not os.access(target, os.W_OK)
        ):
            raise StorageError(
                f"cannot open database {self.path}: folder {folder} is not writable "
                "(SQLite needs to create journal files beside the database)"
            )

    def _open(self) -> apsw.Connection:
        flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
        try:
            conn = apsw.Connection(self.path, flags=flags)
            conn.set_busy_timeout(self.busy_timeout_ms)
            mode = rows_of(conn, "PRAGMA journal_mode=WAL")[0][0]
            if str(mode).lower() != "wal":
                raise StorageError(f"cannot put {self.path} in WAL mode (got {mode!r})")
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            conn.execute("PRAGMA foreign_keys=ON")
        except apsw.NotADBError:
            raise StorageError(
                f"{self.path} is not a SQLite database; choose another --db or move it away"
            ) from None
        except (apsw.CantOpenError, apsw.ReadOnlyError, apsw.IOError) as exc:
            raise StorageError(f"cannot open database {self.path}: {exc}") from None
        with self._all_lock:
            self._all.append(conn)
        return conn

    def _state(self) -> _ThreadState:
        state: _ThreadState | None = getattr(self._local, "state", None)
        if state is None:
            state = _ThreadState(conn=self._open())
            self._local.state = state
            if not self._migrated:
                self.migrate()
        return state

    def _conn(self) -> apsw.Connection:
        return self._state().conn

    def close(self) -> None:
        """Close every connection this storage opened (all threads)."""
        with self._all_lock:
            conns, self._all = self._all, []
        for conn in conns:
            try:
                conn.close(True)
            except apsw.Error as exc:  # pragma: no cover - closing is best effort
                log.warning("closing %s: %s", self.path, exc)
        self._local = threading.local()

    def migrate(self) -> None:
        conn = self._state().conn
        with self._write():
            version = rows_of(conn, "PRAGMA user_version")[0][0]
            if version > SCHEMA_VERSION:
                raise StorageError(
                    f"database {self.path} has schema version {version}, newer than this "
                    f"jobcore knows ({SCHEMA_VERSION}); upgrade jobcore"
                )
            for number in range(version + 1, SCHEMA_VERSION + 1):
                name, script = MIGRATIONS[number - 1]
                log.info("migrating %s to schema %d: %s", self.path, number, name)
                conn.execute(script)
            if version != SCHEMA_VERSION:
                conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        self._migrated = True

    # -- transactions ---------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[apsw.Connection]:
        state = self._state()
        conn = state.conn
        depth = state.depth
        mark = len(state.callbacks)
        conn.execute("BEGIN IMMEDIATE" if depth == 0 else f"SAVEPOINT jobcore_{depth}")
        state.depth += 1
        try:
            yield conn
        except BaseException:
            state.depth = depth
            del state.callbacks[mark:]
            if depth == 0:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            elif conn.in_transaction:
                conn.execute(f"ROLLBACK TO jobcore_{depth}; RELEASE jobcore_{depth}")
            raise
        state.depth = depth
        if depth:
            conn.execute(f"RELEASE jobcore_{depth}")
            return
        try:
            conn.execute("COMMIT")
        except BaseException:
            state.callbacks.clear()
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        callbacks, state.callbacks = state.callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.exception("after-commit callback failed")

    @contextmanager
    def transaction(self) -> Iterator[apsw.Connection]:
        with self._write() as conn:
            yield conn

    def after_commit(self, callback: Callable[[], None]) -> None:
        state = self._state()
        if state.depth:
            state.callbacks.append(callback)
        else:
            callback()

    # -- enqueue ---------------------------------------------------------------

    def _insert_one(self, conn: apsw.Connection, job: NewJob, now: int) -> Inserted:
        if job.idempotency_key is not None:
            existing = rows_of(
                conn, Q["find_unfinished_by_key"], {"type": job.type, "key": job.idempotency_key}
            )
            if existing:
                return Inserted(row_to_job(existing[0]), created=False)
        conn.execute(_INSERT, insert_values(job, now))
        return Inserted(new_row(job, now), created=True)

    def insert(self, jobs: Sequence[NewJob], now: int) -> list[Inserted]:
        with self._write() as conn:
            if any(job.idempotency_key is not None for job in jobs):
                return [self._insert_one(conn, job, now) for job in jobs]
            if len(jobs) == 1:
                conn.execute(_INSERT, insert_values(jobs[0], now))
            else:
                conn.executemany(_INSERT, [insert_values(job, now) for job in jobs])
        return [Inserted(new_row(job, now), created=True) for job in jobs]

    # -- the worker's path ---------------------------------------------------------

    def claim(
        self,
        *,
        worker: str,
        limit: int,
        now: int,
        lease_ms: int,
        queues: Sequence[str] = (),
        types: Sequence[str] = (),
    ) -> list[Job]:
        with self._write() as conn:
            return self._claim(conn, worker, limit, now, lease_ms, queues, types, promote=True)

    def _claim(
        self,
        conn: apsw.Connection,
        worker: str,
        limit: int,
        now: int,
        lease_ms: int,
        queues: Sequence[str],
        types: Sequence[str],
        *,
        promote: bool,
    ) -> list[Job]:
        params: dict[str, Any] = {
            "worker": worker,
            "limit": limit,
            "now": now,
            "lease_ms": lease_ms,
        }
        filters = _in("queue", queues, "q", params) + _in("type", types, "t", params)
        if promote:
            conn.execute(Q["promote_due"], {"now": now})
        rows = rows_of(conn, Q["claim"].replace("{filters}", filters), params)
        jobs = [row_to_job(row) for row in rows]
        jobs.sort(key=lambda job: (-job.priority, job.run_at, job.id))
        return jobs

    def commit_batch(
        self,
        outcomes: Sequence[Outcome],
        *,
        worker: str,
        claim_limit: int,
        now: int,
        lease_ms: int,
        queues: Sequence[str] = (),
        types: Sequence[str] = (),
        promote: bool = True,
    ) -> tuple[list[Recorded], list[Job]]:
        with self._write() as conn:
            recorded = self._record(conn, outcomes, now)
            claimed = (
                self._claim(
                    conn, worker, claim_limit, now, lease_ms, queues, types, promote=promote
                )
                if claim_limit > 0
                else []
            )
        return recorded, claimed

    def next_due(self) -> int | None:
        value = rows_of(self._conn(), Q["next_due"])[0][0]
        return None if value is None else int(value)

    def extend_leases(self, leases: Sequence[Lease], *, now: int, lease_ms: int) -> dict[str, bool]:
        owned: dict[str, bool] = {}
        with self._write() as conn:
            for lease in leases:
                rows = rows_of(
                    conn,
                    Q["extend_lease"],
                    {
                        "id": lease.job_id,
                        "worker": lease.worker,
                        "attempt": lease.attempt,
                        "now": now,
                        "lease_ms": lease_ms,
                    },
                )
                if rows:
                    owned[lease.job_id] = bool(rows[0][0])
        return owned

    def cancel_requested(self, worker: str) -> set[str]:
        rows = rows_of(self._conn(), Q["cancel_requested"], {"worker": worker})
        return {row[0] for row in rows}

    def _apply(self, conn: apsw.Connection, outcome: Outcome, now: int) -> Recorded:
        lease = outcome.lease
        fence = {"id": lease.job_id, "worker": lease.worker, "attempt": lease.attempt, "now": now}
        # With the claimed row at hand the statement needs no RETURNING: the new row is
        # derived in Python (`_after`), saving a read-back and JSON decoding per job.
        returning = lease.job is None
        match outcome:
            case Completed(result=result):
                fence["result"] = compact_json(result)
                name = "complete"
            case Retrying(error=error, run_at=run_at):
                fence.update(error=error, run_at=run_at)
                name = "retry_later"
            case Failed(error=error):
                fence["error"] = error
                name = "fail"
            case Released():
                name = "release"
            case Cancelled(error=error):
                fence["error"] = error
                name = "cancel_owned"
        sql = Q[name] if returning else Q[name].rsplit("RETURNING", 1)[0]
        rows = rows_of(conn, sql, fence)
        if returning:
            job = row_to_job(rows[0]) if rows else None
        else:
            job = after_transition(lease.job, outcome, now) if conn.changes() == 1 else None  # type: ignore[arg-type]
        if job is None or not isinstance(outcome, Completed):
            return Recorded(outcome, job)
        inserted = tuple(self._insert_one(conn, child, now) for child in outcome.children)
        return Recorded(outcome, job, inserted)

    def record(self, outcomes: Sequence[Outcome], *, now: int) -> list[Recorded]:
        with self._write() as conn:
            return self._record(conn, outcomes, now)

    def _record(
        self, conn: apsw.Connection, outcomes: Sequence[Outcome], now: int
    ) -> list[Recorded]:
        recorded: list[Recorded] = []
        for outcome in outcomes:
            # Only a completion with children can fail half-way: it alone gets a savepoint.
            guard = (
                self._write()
                if isinstance(outcome, Completed) and outcome.children
                else nullcontext()
            )
            try:
                with guard:
                    recorded.append(self._apply(conn, outcome, now))
            except (apsw.ConstraintError, apsw.SQLError, TypeError, ValueError) as exc:
                # One unrecordable outcome must not block the batch: fail that job.
                log.error("could not record outcome for job %s: %s", outcome.lease.job_id, exc)
                fallback = Failed(lease=outcome.lease, error=f"could not record outcome: {exc}")
                recorded.append(self._apply(conn, fallback, now))
        return recorded

    def sweep(self, *, now: int) -> list[Swept]:
        swept: list[Swept] = []
        with self._write() as conn:
            for name, action in (
                ("sweep_cancel", "cancelled"),
                ("sweep_fail", "failed"),
                ("sweep_reclaim", "reclaimed"),
            ):
                for row in rows_of(conn, Q[name], {"now": now, "error": LEASE_EXPIRED}):
                    swept.append(Swept(row_to_job(row), action))
        return swept

    # -- operators ------------------------------------------------------------------

    def get(self, job_id: str) -> Job | None:
        rows = rows_of(self._conn(), Q["get_job"], {"id": job_id})
        return row_to_job(rows[0]) if rows else None

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
            _in("status", statuses, "s", params)
            + _in("type", types, "t", params)
            + _in("queue", queues, "q", params)
        )
        if finished_after is not None:
            params["finished_after"] = finished_after
            filters += " AND completed_at >= :finished_after"
        rows = rows_of(self._conn(), Q["list_jobs"].replace("{filters}", filters), params)
        return [row_to_job(row) for row in rows]

    def failed_ids(self, types: Sequence[str] = ()) -> list[str]:
        params: dict[str, Any] = {}
        sql = Q["failed_ids"].replace("{filters}", _in("type", types, "t", params))
        return [row[0] for row in rows_of(self._conn(), sql, params)]

    def retry(self, job_ids: Sequence[str], *, now: int) -> list[Job | None]:
        results: list[Job | None] = []
        with self._write() as conn:
            for job_id in job_ids:
                try:
                    rows = rows_of(conn, Q["operator_retry"], {"id": job_id, "now": now})
                except apsw.ConstraintError:
                    job = self.get(job_id)
                    key = job.idempotency_key if job else "?"
                    raise IllegalTransition(
                        f"cannot retry job {job_id}: another unfinished job holds its "
                        f"idempotency key {key!r}"
                    ) from None
                results.append(row_to_job(rows[0]) if rows else None)
        return results

    def cancel(self, job_ids: Sequence[str], *, now: int) -> list[Job | None]:
        results: list[Job | None] = []
        with self._write() as conn:
            for job_id in job_ids:
                params = {"id": job_id, "now": now}
                rows = rows_of(conn, Q["cancel_waiting"], params)
                if not rows:
                    rows = rows_of(conn, Q["request_cancel"], params)
                results.append(row_to_job(rows[0]) if rows else None)
        return results

    def prune(self, *, before: int, statuses: Sequence[str] = (), types: Sequence[str] = ()) -> int:
        params: dict[str, Any] = {"before": before}
        filters = _in("status", statuses, "s", params) + _in("type", types, "t", params)
        with self._write() as conn:
            conn.execute(Q["prune"].replace("{filters}", filters), params)
            return int(conn.changes())

    def scan(
        self, *, statuses: Sequence[str] = (), types: Sequence[str] = (), batch: int = 500
    ) -> Iterator[Job]:
        after = ""
        while True:
            params: dict[str, Any] = {"after": after, "limit": batch}
            filters = _in("status", statuses, "s", params) + _in("type", types, "t", params)
            rows = rows_of(self._conn(), Q["scan_jobs"].replace("{filters}", filters), params)
            jobs = [row_to_job(row) for row in rows]
            yield from jobs
            if len(jobs) < batch:
                return
            after = jobs[-1].id

    def count_by_status(self) -> dict[str, int]:
        return {status: n for status, n in rows_of(self._conn(), Q["count_by_status"])}

    def stats(self, *, now: int) -> Stats:
        conn = self._conn()
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

    def changed(self) -> bool:
        state = self._state()
        version = rows_of(state.conn, "PRAGMA data_version")[0][0]
        previous, state.data_version = state.data_version, version
        return previous is not None and version != previous
