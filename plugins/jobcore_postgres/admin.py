"""The PostgreSQL backend's operator and housekeeping writes: retry, cancel, prune, the
sweep and store-level locks, events added by hand, whole-row imports (`jobcore copy`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import psycopg

from jobcore.errors import IllegalTransition, StorageError
from jobcore.models import Job
from jobcore.storage.base import Claim, Swept
from jobcore.transitions import CANCEL_WAITING, OPERATOR_RETRY, REQUEST_CANCEL, SWEEP, Transition
from jobcore_postgres.event_order import prune_sql
from jobcore_postgres.reads import filters
from jobcore_postgres.rows import clean_text, json_strict, jsonb_text, row_to_job
from jobcore_postgres.schema import channel
from jobcore_postgres.statements import JOB_COLUMNS, Dialect, by_id_statement, sweep_statement

Conn = psycopg.Connection[tuple[Any, ...]]

SWEEP_LIMIT = 1000  # expired leases handled per sweep transition and call
PRUNE_BATCH = 5000  # finished jobs deleted per transaction
EVENT_PRUNE_BATCH = 2_000  # events looked at (and old ones deleted) per transaction
EVENT_PRUNE_BUDGET_S = 2.0  # a sweep catching up on old events stops after this long


def in_id_order(job_ids: Sequence[str]) -> list[int]:
    """Positions of `job_ids`, ordered by id: a transaction writing several jobs takes
    their rows in the order every other writer of them does (a worker's heartbeat and
    group commit), so it cannot deadlock with them."""
    return sorted(range(len(job_ids)), key=job_ids.__getitem__)


class PostgresAdmin:
    """Operator writes of `PostgresStorage` (a mixin: it provides `_write`, `_d`, `_params`)."""

    _d: Dialect
    _holder: str
    sweep_hold_ms: int
    event_retention_ms: int
    _write: Callable[[], AbstractContextManager[Conn]]
    _connection: Callable[[], AbstractContextManager[Conn]]
    _params: Callable[..., dict[str, Any]]
    _statement: Callable[..., str]

    def import_jobs(self, jobs: Sequence[Job], *, replace: bool = False) -> None:
        """Write whole rows as they are (`jobcore copy`); `replace` overwrites equal ids."""
        if not jobs:
            return
        casts = {"payload": "::json", "result": "::json", "meta": "::json"}
        casts.update(errors="::jsonb", history="::jsonb")
        values = ", ".join(f"%s{casts.get(name, '')}" for name in JOB_COLUMNS)
        sql = f"INSERT INTO {self._d.table('jobs')} ({', '.join(JOB_COLUMNS)}) VALUES ({values})"
        if replace:
            updates = ", ".join(f"{name} = EXCLUDED.{name}" for name in JOB_COLUMNS[1:])
            sql += f" ON CONFLICT (id) DO UPDATE SET {updates}"
        # error texts as outcomes store them (`clean_text`): a store that took a NUL or a
        # lone surrogate in them (SQLite) does not fail the copy
        cleaners: dict[str, Callable[[Any], Any]] = {
            **dict.fromkeys(("payload", "result", "meta"), json_strict),
            **dict.fromkeys(("errors", "history"), jsonb_text),
            "last_error": clean_text,
            "status": str,
        }
        rows = [
            tuple(
                value if clean is None else clean(value)
                for value, clean in ((getattr(job, n), cleaners.get(n)) for n in JOB_COLUMNS)
            )
            for job in jobs
        ]
        # inside a caller's transaction (`jobcore copy`) its connection, with no savepoint
        # per batch: a copy of many batches would otherwise use a subtransaction for each
        within = getattr(getattr(self, "_local", None), "tx", None) is not None
        with self._connection() if within else self._write() as conn, conn.cursor() as cursor:
            cursor.executemany(sql, rows)
            # whole rows append no event, so no trigger notifies: wake the idle workers,
            # which otherwise find the copied pending jobs only at their next poll
            cursor.execute("SELECT pg_notify(%s, '')", (channel(self._d.schema),))

    def _take_lock(self, conn: Conn, name: str, holder: str, ttl_ms: int, force: bool) -> bool:
        locks = self._d.table("locks")
        condition = (
            ""
            if force
            else (f" WHERE {locks}.holder = EXCLUDED.holder OR {locks}.expires_at < {self._d.now}")
        )
        row = conn.execute(
            f"INSERT INTO {locks} (name, holder, expires_at) "
            f"VALUES (%(name)s, %(holder)s, {self._d.now} + %(ttl)s::bigint) "
            "ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, "
            f"expires_at = EXCLUDED.expires_at{condition} RETURNING holder",
            self._params(name=name, holder=holder, ttl=ttl_ms),
        ).fetchone()
        return row is not None

    def acquire_lock(self, name: str, holder: str, ttl_ms: int) -> bool:
        with self._connection() as conn:  # one statement: atomic without BEGIN/COMMIT
            return self._take_lock(conn, name, holder, ttl_ms, force=False)

    def release_lock(self, name: str, holder: str) -> None:
        with self._connection() as conn:
            conn.execute(
                f"DELETE FROM {self._d.table('locks')} WHERE name = %s AND holder = %s",
                (name, holder),
            )

    def sweep(
        self,
        *,
        force: bool = False,
        hold_ms: int | None = None,
        only: Sequence[Claim] | None = None,
    ) -> list[Swept]:
        swept: list[Swept] = []
        params: dict[str, Any] = {}
        if only is not None:
            params = {
                "only_ids": [c.job_id for c in only],
                "only_leases": [c.lease_id for c in only],
                "only_expiries": [c.lease_expires_at for c in only],
            }
        with self._write() as conn:
            hold = self.sweep_hold_ms if hold_ms is None else hold_ms
            if not self._take_lock(conn, "sweep", self._holder, hold, force):
                return []
            for transition, action in SWEEP:
                sql = self._statement(
                    ("sweep", transition.name, only is not None),
                    sweep_statement,
                    transition,
                    self._d,
                    SWEEP_LIMIT,
                    only is not None,
                )
                for row in conn.execute(sql, self._params(**params)).fetchall():
                    swept.append(Swept(row_to_job(row), action))
            more = self._prune_events(conn)
        deadline = time.monotonic() + EVENT_PRUNE_BUDGET_S
        while more and time.monotonic() < deadline:  # catching up: one short transaction each
            with self._connection() as conn:
                more = self._prune_events(conn)
        return swept

    def _prune_events(self, conn: Conn) -> bool:
        """Delete one batch of events older than the retention; True if more may remain."""
        # a prefix of the delivery order, walking events_delivery at most one batch far;
        # only events already deliverable, never the newest single event (see event_order)
        row = conn.execute(
            self._statement("prune_events", prune_sql, self._d, EVENT_PRUNE_BATCH),
            self._params(keep=self.event_retention_ms),
        ).fetchone()
        return row is not None and int(row[0]) >= EVENT_PRUNE_BATCH

    def _by_id(self, conn: Conn, transition: Transition, job_id: str) -> Job | None:
        sql = self._statement(
            ("by_id", transition.name), lambda: by_id_statement(transition, self._d)
        )
        row = conn.execute(sql, self._params(id=job_id)).fetchone()
        return None if row is None else row_to_job(row)

    def retry(self, job_ids: Sequence[str]) -> list[Job | None]:
        results: list[Job | None] = [None] * len(job_ids)
        with self._write() as conn:
            for i in in_id_order(job_ids):
                job_id = job_ids[i]
                try:
                    results[i] = self._by_id(conn, OPERATOR_RETRY, job_id)
                except psycopg.errors.UniqueViolation:
                    raise IllegalTransition(
                        f"cannot retry job {job_id}: another unfinished job holds its "
                        "idempotency key"
                    ) from None
        return results

    def cancel(self, job_ids: Sequence[str]) -> list[Job | None]:
        results: list[Job | None] = [None] * len(job_ids)
        with self._write() as conn:
            for i in in_id_order(job_ids):
                results[i] = self._cancel_one(conn, job_ids[i])
        return results

    def _cancel_one(self, conn: Conn, job_id: str) -> Job | None:
        """Cancel a waiting job, or request the cancel of a claimed one.

        Each statement sees the row as last committed: a claimed job released or retried
        by its worker between the two (claimed, then pending) matched neither. If neither
        matched, the row is locked and, while unfinished, both are tried again: it can no
        longer move, so the cancel of an unfinished job always lands.
        """
        for locked in (False, True):
            job = self._by_id(conn, CANCEL_WAITING, job_id)
            if job is None:
                job = self._by_id(conn, REQUEST_CANCEL, job_id)
            if job is not None or locked:
                return job
            row = conn.execute(
                f"SELECT status FROM {self._d.table('jobs')} WHERE id = %s FOR UPDATE", (job_id,)
            ).fetchone()
            if row is None or row[0] not in ("scheduled", "pending", "claimed"):
                return None
        return None  # pragma: no cover - the loop returns

    def prune(self, *, before: int, statuses: Sequence[str] = (), types: Sequence[str] = ()) -> int:
        """Delete finished jobs in bounded batches (short transactions, no long row locks)."""
        params: dict[str, Any] = {"before": before}
        # the statuses written out, as in the predicate of jobs_finished: a prepared (generic)
        # plan could not prove a parameter array implies it, and would read every finished job
        where = "WHERE status IN ('completed', 'failed', 'cancelled') AND completed_at < %(before)s"
        where += filters(params, status=statuses, type=types)
        jobs = self._d.table("jobs")
        sql = (
            f"DELETE FROM {jobs} WHERE id IN (SELECT id FROM {jobs} {where} "
            f"ORDER BY completed_at LIMIT {PRUNE_BATCH} FOR UPDATE SKIP LOCKED)"
        )
        total = 0
        while True:
            with self._connection() as conn:  # each batch its own short transaction
                deleted = conn.execute(sql, params).rowcount
            total += max(deleted, 0)
            if deleted < PRUNE_BATCH:
                return total

    def add_event(
        self,
        kind: str,
        *,
        job_id: str | None = None,
        worker_id: str | None = None,
        data: dict[str, Any] | None = None,
    ) -> int:
        if not kind:
            raise StorageError("an event needs a kind, e.g. 'worker:registered'")
        with self._connection() as conn:
            row = conn.execute(
                f"INSERT INTO {self._d.table('events')} (at, kind, job_id, worker_id, data) "
                f"VALUES ({self._d.now}, %(kind)s, %(job_id)s, %(worker_id)s, %(data)s::jsonb) "
                "RETURNING seq",
                self._params(
                    kind=kind,
                    job_id=job_id,
                    worker_id=worker_id,
                    data=None if data is None else jsonb_text(data),
                ),
            ).fetchone()
        assert row is not None
        return int(row[0])
