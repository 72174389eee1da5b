"""The built-in storage backend: SQLite through APSW, one connection per thread.

Every write is an explicit `BEGIN IMMEDIATE`; reads run beside a writer (WAL).
Transition statements are generated from `jobcore.transitions`
(`sqlite_statements`); other queries live in `queries.sql`. No APSW
exception leaves this module: `storage_error` turns each into a
`StorageError` subclass naming the problem and the fix.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import apsw

from jobcore import start_slots
from jobcore import transitions as T
from jobcore.errors import SchemaTooNew, StorageError, StorageUnavailable
from jobcore.models import (
    Completed,
    Failed,
    Job,
    Lease,
    NewJob,
    Outcome,
    replace_job,
)
from jobcore.owned import own
from jobcore.storage import powers
from jobcore.storage import sqlite_statements as S
from jobcore.storage.base import Claim, Inserted, Recorded, Swept
from jobcore.storage.migrations import MIGRATIONS, SCHEMA_VERSION
from jobcore.storage.rows import (
    insert_values,
    inserted_rows,
    new_row,
    result_json,
    row_to_job,
    rows_of,
    stored_outcome,
    update_one,
)
from jobcore.storage.sqlite_admin import SQLiteAdmin
from jobcore.storage.sqlite_connect import open_connection
from jobcore.storage.sqlite_errors import boundary, check_location, clean_text, storage_error
from jobcore.storage.sqlite_identity import FileIdentity
from jobcore.storage.sqlite_limits import SQLiteLimits
from jobcore.storage.sqlite_outbox import AppConnections
from jobcore.storage.sqlite_reads import Q, SQLiteReads
from jobcore.storage.sqlite_starts import Adoption
from jobcore.storage.sqlite_statements import (
    EXTEND_SQL,
    FAIL_UNRECORDABLE_SQL,
    MARK_STARTED_SQL,
    OWNER_SQL,
    PROMOTE_SQL,
    SWEEP_ONLY_SQL,
    SWEEP_SQL,
)
from jobcore.storage.sqlite_walindex import WalIndexHeader
from jobcore.storage.sqlite_write import WriteTransaction
from jobcore.storage.sqlite_writewatch import WalWriteWatch
from jobcore.timeutil import now_ms

log = logging.getLogger("jobcore.storage")

LEASE_EXPIRED = T.LEASE_EXPIRED
PRUNE_CHUNK = 20_000
"""Events deleted per transaction, so pruning never holds the write lock for long."""
PRUNE_BUDGET_S = 2.0
"""Time one sweep may spend catching up on old events (in chunks)."""

_INSERT = Q["insert_job"]  # no read-back: `new_row` builds the inserted Job
_NO_SAVEPOINT = nullcontext()  # reusable: the guard of an outcome that cannot fail half-way


def sqlite_path(url: str) -> str | None:
    """The file path of a `sqlite:` URL or plain path; None for other URL schemes."""
    if url.startswith("sqlite:"):
        rest = url[len("sqlite:") :]
        return rest[2:] if rest.startswith("//") else rest
    if "://" in url:
        return None
    return url


@dataclass
class _ThreadState:
    conn: apsw.Connection
    depth: int = 0
    callbacks: list[Callable[[], None]] = field(default_factory=list)
    data_version: int | None = None
    wal_index: WalIndexHeader | None = None  # lets a change check skip the PRAGMA


class SQLiteStorage(SQLiteReads, SQLiteLimits, SQLiteAdmin):
    """Jobs in one SQLite file in WAL mode; every write is an explicit BEGIN IMMEDIATE.

    `clock` (ms UTC) replaces this machine's clock, for tests; `event_retention`, `sweep_hold`: s.
    """

    default_prefetch = 100  # a worker's `prefetch` unless set: see `start_slots`, README

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "FULL",
        busy_timeout: float = 30.0,
        create: bool = True,
        clock: Callable[[], int] | None = None,
        event_retention: float = 3600.0,
        sweep_hold: float = 30.0,
    ) -> None:
        self.path = str(path)
        if self.path in ("", ":memory:") or self.path.startswith("file::memory:"):
            raise StorageUnavailable(
                "an in-memory database cannot be shared by worker threads; give a file path"
            )
        if synchronous.upper() not in ("FULL", "NORMAL", "EXTRA", "OFF"):
            raise StorageError(f"synchronous must be FULL, NORMAL or EXTRA, not {synchronous!r}")
        self.synchronous = synchronous.upper()
        self.busy_timeout_ms = int(busy_timeout * 1000)
        self._create = create
        self._clock = clock or now_ms
        self.event_retention_ms = int(event_retention * 1000)
        self.sweep_hold_ms = int(sweep_hold * 1000)
        self.holder = f"{os.getpid()}:{secrets.token_hex(8)}"  # this instance, for locks
        self._local = threading.local()
        # every open connection, to close them all; weak, so a finished thread's one closes
        self._all: weakref.WeakSet[apsw.Connection] = weakref.WeakSet()
        self._all_lock = threading.Lock()
        self._migrated = False
        self._holds_sweep = False
        self._wake_key: str | None = None
        self._app = AppConnections(self.path)  # the application's own (outbox) connections
        self._identity = FileIdentity(self.path)
        check_location(self.path, create=self._create)
        own(self.path, "database")  # never a files job's target

    def now(self) -> int:
        """The store's clock (this machine's, or the injected one), ms UTC."""
        return self._clock()

    @property
    def wake_key(self) -> str:
        """Identifies the database for in-process wake-ups."""
        if self._wake_key is None:
            self._wake_key = os.path.realpath(self.path)
        return self._wake_key

    # -- connections ---------------------------------------------------------------

    def _open(self) -> apsw.Connection:
        conn = open_connection(self.path, self.synchronous, self.busy_timeout_ms)
        with self._all_lock:
            self._all.add(conn)
        self._identity.remember()
        return conn

    def file_changed(self) -> str | None:
        """Why `path` no longer names the file this storage opened (replaced, deleted), or
        None; one `stat`, for a worker's poll timer (`jobcore.storage.sqlite_identity`)."""
        return self._identity.changed()

    def _raw_state(self) -> _ThreadState:
        """This thread's connection, opened on first use (the schema not checked)."""
        state: _ThreadState | None = getattr(self._local, "state", None)
        if state is None:
            conn = self._open()
            state = _ThreadState(
                conn=conn,
                data_version=self._data_version(conn),
                wal_index=WalIndexHeader(conn.filename),
            )
            self._local.state = state
        return state

    def _state(self) -> _ThreadState:
        """This thread's connection, on a schema this code knows (migrated if need be)."""
        state = self._raw_state()
        if not self._migrated:
            self.migrate()
            state.data_version = self._data_version(state.conn)
        return state

    def _own(self) -> apsw.Connection | None:
        """This thread's own connection, if it already exists (else None)."""
        state: _ThreadState | None = getattr(self._local, "state", None)
        return None if state is None else state.conn

    def _conn(self) -> apsw.Connection:
        return self._state().conn

    @staticmethod
    def _data_version(conn: apsw.Connection) -> int:
        return int(rows_of(conn, "PRAGMA data_version")[0][0])

    def close(self) -> None:
        """Release held locks and close every connection this storage opened (all threads)."""
        if self._holds_sweep:  # let another process sweep at once; wait at most a second
            try:
                conn = self._raw_state().conn
                conn.set_busy_timeout(1000)
                self.release_lock("sweep", self.holder)
            except StorageError as exc:
                log.warning("releasing the sweep lock of %s: %s", self.path, exc)
            self._holds_sweep = False
        with self._all_lock:
            conns, self._all = list(self._all), weakref.WeakSet()
        for conn in conns:
            try:
                conn.close(True)
            except apsw.Error as exc:  # pragma: no cover - closing is best effort
                log.warning("closing %s: %s", self.path, exc)
        self._local = threading.local()

    def _schema_version(self, conn: apsw.Connection) -> int:
        return int(rows_of(conn, "PRAGMA user_version")[0][0])

    @boundary
    def migrate(self) -> None:
        """Bring the schema up to date; reads only, unless there is migration work to do."""
        conn = self._raw_state().conn
        if self._check_version(self._schema_version(conn)):
            self._migrated = True
            return
        with self._write(migrated=False):
            version = self._schema_version(conn)  # again, under the write lock
            if not self._check_version(version):
                for number in range(version + 1, SCHEMA_VERSION + 1):
                    name, script = MIGRATIONS[number - 1]
                    log.info("migrating %s to schema %d: %s", self.path, number, name)
                    conn.execute(script)
                conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        self._migrated = True

    def _check_version(self, version: int) -> bool:
        """True when the schema is current; raises SchemaTooNew for a newer one."""
        if version > SCHEMA_VERSION:
            raise SchemaTooNew(
                f"database {self.path} has schema version {version}, newer than this "
                f"jobcore knows ({SCHEMA_VERSION}); upgrade jobcore"
            )
        return version == SCHEMA_VERSION

    # -- transactions ---------------------------------------------------------------

    def _exec(self, conn: apsw.Connection, sql: str) -> None:
        try:
            conn.execute(sql)
        except apsw.Error as exc:
            raise storage_error(exc, self.path, self.busy_timeout_ms) from exc

    def _write(self, *, migrated: bool = True) -> WriteTransaction:
        """This thread's write transaction: `BEGIN IMMEDIATE`, or a savepoint inside one.

        On leaving: COMMIT (then the after-commit callbacks) or RELEASE; ROLLBACK (TO) on
        any exception, dropping the callbacks registered inside. `migrated=False`: the
        schema is not checked (migration's own transaction).
        """
        return WriteTransaction(self, migrated)

    @contextmanager
    def transaction(self) -> Iterator[apsw.Connection]:
        with self._write() as conn:
            yield conn

    def after_commit(self, callback: Callable[[], None], *, conn: Any = None) -> None:
        if conn is not None and conn is self._own():
            conn = None
        if conn is not None:
            if not self._app.defer(conn, callback):
                callback()
            return
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

    def _insert_all(
        self, conn: apsw.Connection, jobs: Sequence[NewJob], now: int
    ) -> list[Inserted]:
        if any(job.idempotency_key is not None for job in jobs):
            return [self._insert_one(conn, job, now) for job in jobs]
        if len(jobs) == 1:
            conn.execute(_INSERT, insert_values(jobs[0], now))
        else:
            conn.executemany(_INSERT, [insert_values(job, now) for job in jobs])
        return inserted_rows(jobs, now)

    @boundary
    def insert(self, jobs: Sequence[NewJob], *, conn: Any = None) -> list[Inserted]:
        if conn is not None and conn is self._own():
            conn = None  # `transaction()`'s own connection: the usual path
        if conn is not None:  # the application's own connection, in its open transaction
            self._app.adopt(conn)
            if self._schema_version(conn) != SCHEMA_VERSION:
                self.migrate()  # on our own connection: needs the write lock only this once
            return self._insert_all(conn, jobs, self.now())
        with self._write() as own:
            return self._insert_all(own, jobs, self.now())

    # -- the worker's path ---------------------------------------------------------

    @boundary
    def claim(
        self,
        *,
        worker: str,
        limit: int,
        lease_ms: int,
        queues: Sequence[str] = (),
        types: Sequence[str] = (),
        start: int | None = None,
    ) -> list[Job]:
        with self._write() as conn:
            return self._claim(
                conn, worker, limit, self.now(), lease_ms, queues, types, start, promote=True
            )

    def _claim(
        self,
        conn: apsw.Connection,
        worker: str,
        limit: int,
        now: int,
        lease_ms: int,
        queues: Sequence[str],
        types: Sequence[str],
        start: int | None,
        *,
        promote: bool,
    ) -> list[Job]:
        if limit <= 0:
            return []
        start = limit if start is None else max(0, start)
        params: dict[str, Any] = {
            "worker": worker,
            "limit": limit,
            "now": now,
            "lease_ms": lease_ms,
            "started_at": now if start >= limit else None,
        }
        if promote:
            conn.execute(PROMOTE_SQL, {"now": now})
        caps, paused = self._claim_state(conn)  # limits and pauses (DESIGN §16): usually none
        jobs = [row_to_job(r) for r in self._claim_limited(conn, caps, queues, types, params)]
        for sql in () if caps else self._claim_statements(conn, queues, types, params, paused):
            jobs += [row_to_job(row) for row in rows_of(conn, sql, params)]  # less paused
            if len(jobs) >= limit:
                break
            params["limit"] = limit - len(jobs)
        jobs.sort(key=lambda job: (-job.priority, job.run_at, job.id))
        if 0 < start < limit and jobs:
            first = jobs[:start]
            self._mark_started(conn, [Lease.of(job) for job in first], now)
            jobs[:start] = [replace_job(job, started_at=now) for job in first]
        return jobs

    @boundary
    def commit_batch(
        self,
        outcomes: Sequence[Outcome],
        *,
        worker: str,
        claim_limit: int,
        lease_ms: int,
        queues: Sequence[str] = (),
        types: Sequence[str] = (),
        promote: bool = True,
        started: Sequence[Lease] = (),
        start: int | None = None,
    ) -> tuple[list[Recorded], list[Job]]:
        with self._write() as conn:
            now = self.now()
            self._local.marked = self._mark_started(conn, started, now) if started else set()
            recorded = self._record(conn, outcomes, now)
            claimed = self._claim(
                conn, worker, claim_limit, now, lease_ms, queues, types, start, promote=promote
            )
        return recorded, claimed

    @boundary
    def extend_leases(self, leases: Sequence[Lease], *, lease_ms: int) -> dict[str, bool]:
        owned: dict[str, bool] = {}
        with self._write() as conn:
            now = self.now()
            for lease in leases:
                rows = rows_of(
                    conn,
                    EXTEND_SQL,
                    {
                        "id": lease.job_id,
                        "lease_id": lease.lease_id,
                        "worker": lease.worker,
                        "now": now,
                        "lease_ms": lease_ms,
                    },
                )
                if rows:
                    owned[lease.job_id] = bool(rows[0][0])
        return owned

    def marked_seen(self) -> set[str]:
        """Ids whose start marker this thread's last `commit_batch` recorded (its `started`
        leases that still held): the worker runs a handler only once its start is durable."""
        marked: set[str] = getattr(self._local, "marked", set())
        return marked

    def _mark_started(self, conn: apsw.Connection, leases: Sequence[Lease], now: int) -> set[str]:
        marked: set[str] = set()
        for lease in leases:
            params = {
                "id": lease.job_id,
                "lease_id": lease.lease_id,
                "worker": lease.worker,
                "now": now,
            }
            if rows_of(conn, MARK_STARTED_SQL, params):
                marked.add(lease.job_id)
        return marked

    @boundary
    def mark_started(self, leases: Sequence[Lease]) -> set[str]:
        with self._write() as conn:
            return self._mark_started(conn, leases, self.now())

    def _apply(self, conn: apsw.Connection, outcome: Outcome, now: int) -> Recorded:
        lease = outcome.lease
        params: dict[str, Any] = {
            "id": lease.job_id,
            "lease_id": lease.lease_id,
            "worker": lease.worker,
            "now": now,
            "error": None,
            "delay_ms": T.outcome_delay_ms(outcome),
            "result": result_json(outcome),
            # when its executor noted the start in a start slot only (not marked here)
            "started_at": lease.job.started_at if lease.job is not None else None,
        }
        # With the claimed row at hand, what may have changed since the claim is read, then
        # the row updated; the new row is derived from the table (`transitions.apply`).
        claimed = lease.job
        for transition in T.owner_transitions(outcome):
            whole, read, update = OWNER_SQL[transition.name]
            params["error"] = clean_text(T.error_text(transition, outcome))
            if claimed is None:
                rows = rows_of(conn, whole, params)
                if not rows:
                    continue
                job = row_to_job(rows[0])
            else:
                rows = rows_of(conn, read, params)
                if not rows:
                    continue
                update_one(conn, update, params)  # the read's guard, in the same transaction
                current = {"started_at": rows[0][0], "cancel_requested": bool(rows[0][1])}
                stored = stored_outcome(outcome, clean_text(T.outcome_error(outcome)))
                job = T.apply(claimed, transition, now=now, outcome=stored, current=current)
            if isinstance(outcome, Completed) and outcome.children:
                inserted = tuple(self._insert_one(conn, child, now) for child in outcome.children)
                return Recorded(outcome, job, "recorded", inserted)
            return Recorded(outcome, job, "recorded")
        return self._not_applied(conn, outcome)

    def _not_applied(self, conn: apsw.Connection, outcome: Outcome) -> Recorded:
        """`already` when this lease already ended with this outcome, else `stale`."""
        rows = rows_of(conn, Q["get_job"], {"id": outcome.lease.job_id})
        if rows:
            job = row_to_job(rows[0])
            wanted = T.recorded_as(outcome)
            for entry in reversed(job.history):
                if entry.get("lease_id") == outcome.lease.lease_id:
                    if (
                        entry.get("outcome") in wanted
                        and entry.get("worker") == outcome.lease.worker
                    ):
                        return Recorded(outcome, job, "already")
                    break
        return Recorded(outcome, None, "stale")

    @boundary
    def record(self, outcomes: Sequence[Outcome]) -> list[Recorded]:
        with self._write() as conn:
            return self._record(conn, outcomes, self.now())

    def _record(
        self, conn: apsw.Connection, outcomes: Sequence[Outcome], now: int
    ) -> list[Recorded]:
        recorded: list[Recorded] = []
        for outcome in outcomes:
            # Only a completion with children can fail half-way: it alone gets a savepoint.
            guard = (
                self._write()
                if isinstance(outcome, Completed) and outcome.children
                else _NO_SAVEPOINT
            )
            try:
                with guard:
                    recorded.append(self._apply(conn, outcome, now))
            except (
                apsw.ConstraintError,
                apsw.SQLError,
                apsw.TooBigError,
                apsw.RangeError,
                apsw.MismatchError,
                TypeError,
                ValueError,
                OverflowError,
                RecursionError,
            ) as exc:
                # One unrecordable outcome must not block the batch: fail that job.
                log.error("could not record outcome for job %s: %s", outcome.lease.job_id, exc)
                fallback = Failed(outcome.lease, f"could not record outcome: {exc}")
                recorded.append(self._last_resort(conn, fallback, now))
        return recorded

    def _last_resort(self, conn: apsw.Connection, outcome: Failed, now: int) -> Recorded:
        """Fail the job; if even that cannot be stored, fail it without touching its JSON."""
        try:
            with self._write():
                return self._apply(conn, outcome, now)
        except (apsw.ConstraintError, apsw.SQLError, apsw.TooBigError, ValueError) as exc:
            log.error("could not record a failure for job %s: %s", outcome.lease.job_id, exc)
        params = {
            "id": outcome.lease.job_id,
            "lease_id": outcome.lease.lease_id,
            "worker": outcome.lease.worker,
            "now": now,
            "error": clean_text(outcome.error),
        }
        rows = rows_of(conn, FAIL_UNRECORDABLE_SQL, params)
        return Recorded(
            outcome, row_to_job(rows[0]) if rows else None, "recorded" if rows else "stale"
        )

    @boundary
    def sweep(
        self,
        *,
        force: bool = False,
        hold_ms: int | None = None,
        only: Sequence[Claim] | None = None,
    ) -> list[Swept]:
        conn = self._conn()
        now = self.now()
        if not force:  # read first: a sweep held elsewhere costs no write lock
            held = rows_of(conn, "SELECT holder, expires_at FROM locks WHERE name = 'sweep'")
            if held and held[0][0] != self.holder and held[0][1] > now:
                return []
        swept: list[Swept] = []
        # start-slot files of dead processes: deleted once what they name is committed
        with Adoption(self.path) as adoption, self._write() as conn:
            now = self.now()
            hold = self.sweep_hold_ms if hold_ms is None else hold_ms
            if not self._acquire(conn, "sweep", self.holder, hold, now, force):
                return []
            self._holds_sweep = True
            adoption.adopt(conn, now, only)  # before the sweep tells started apart
            for sql, error, action in SWEEP_SQL if only is None else SWEEP_ONLY_SQL:
                for row in rows_of(conn, sql, {"now": now, "error": error, "only": S.listed(only)}):
                    swept.append(Swept(row_to_job(row), action))
            more = self._prune_events(conn, now)
        deadline = time.monotonic() + PRUNE_BUDGET_S
        while more and time.monotonic() < deadline:  # catching up: other writers go between
            time.sleep(0.001)
            with self._write() as conn:
                more = self._prune_events(conn, now)
        return swept

    def start_slots(self, worker: str) -> start_slots.StartSlots | None:
        """Where `worker`'s executors note each start (`jobcore.start_slots`); None when its
        file cannot be made (the worker then marks starts in the database)."""
        return start_slots.StartSlots.open(self.path, worker)

    def watch_writes(self, cond: threading.Condition) -> powers.WriteWatch:
        """A watch of the WAL file that lets an idle worker sleep (`sqlite_writewatch`);
        `powers.Polling` where it cannot be had (a warning says why)."""
        try:
            return WalWriteWatch.open(self._raw_state().conn.filename, cond)  # as SQLite named it
        except Exception as exc:  # the store is unwell: the waiter polls, and learns why
            log.warning("cannot watch %s for writes (%s); polling it", self.path, exc)
            return powers.Polling()

    def _prune_events(self, conn: apsw.Connection, now: int) -> bool:
        """Delete one chunk of events older than the retention; True if more may remain."""
        conn.execute(
            Q["prune_events"], {"before": now - self.event_retention_ms, "chunk": PRUNE_CHUNK}
        )
        return int(conn.changes()) >= PRUNE_CHUNK

    @boundary
    def wait_for_change(self, timeout: float) -> bool:
        state = self._state()
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            if self._changed(state):
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            time.sleep(min(0.002, remaining))

    def _changed(self, state: _ThreadState) -> bool:
        """Another connection committed since this thread last looked (`PRAGMA data_version`)."""
        if state.wal_index is not None and state.wal_index.unchanged():
            return False
        version = self._data_version(state.conn)
        if version == state.data_version:
            return False
        state.data_version = version
        return True
