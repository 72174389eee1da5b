"""The SQLite backend's operator writes, store-level locks, events added by hand, and the
hub's state beside the jobs (`hub_store()`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import apsw

from jobcore.errors import IllegalTransition, StorageError
from jobcore.models import Job, compact_json
from jobcore.storage.hub_state import HubStore
from jobcore.storage.rows import row_to_job, rows_of
from jobcore.storage.sqlite_errors import boundary
from jobcore.storage.sqlite_pauses import SQLitePauses
from jobcore.storage.sqlite_reads import Q, in_filter
from jobcore.storage.sqlite_statements import (
    CANCEL_WAITING_SQL,
    OPERATOR_RETRY_SQL,
    REQUEST_CANCEL_SQL,
)

_ACQUIRE_LOCK = """
INSERT INTO locks (name, holder, expires_at) VALUES (:name, :holder, :now + :ttl)
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
 WHERE locks.holder = excluded.holder OR locks.expires_at <= :now OR :force
RETURNING holder
"""


class SQLiteAdmin(SQLitePauses):
    """Operator transitions, locks and `add_event` of `SQLiteStorage` (a mixin; its pauses
    of queues and types, DESIGN §16, come from `SQLitePauses`)."""

    path: str
    busy_timeout_ms: int
    _write: Callable[..., AbstractContextManager[apsw.Connection]]
    now: Callable[[], int]
    get: Callable[[str], Job | None]

    def _acquire(
        self, conn: apsw.Connection, name: str, holder: str, ttl: int, now: int, force: bool
    ) -> bool:
        params = {"name": name, "holder": holder, "now": now, "ttl": ttl, "force": int(force)}
        return bool(rows_of(conn, _ACQUIRE_LOCK, params))

    @boundary
    def acquire_lock(self, name: str, holder: str, ttl_ms: int) -> bool:
        with self._write() as conn:
            return self._acquire(conn, name, holder, ttl_ms, self.now(), False)

    @boundary
    def release_lock(self, name: str, holder: str) -> None:
        with self._write() as conn:
            conn.execute(
                "DELETE FROM locks WHERE name = :name AND holder = :holder",
                {"name": name, "holder": holder},
            )

    # -- events --------------------------------------------------------------------

    @boundary
    def add_event(
        self,
        kind: str,
        *,
        job_id: str | None = None,
        worker_id: str | None = None,
        data: dict[str, Any] | None = None,
    ) -> int:
        if not isinstance(kind, str) or not kind:
            raise StorageError(f"event kind must be a non-empty string, not {kind!r}")
        try:
            encoded = None if data is None else compact_json(data)
        except (TypeError, ValueError) as exc:
            raise StorageError(f"event data must be a JSON object: {exc}") from None
        with self._write() as conn:
            rows = rows_of(
                conn,
                Q["add_event"],
                {
                    "at": self.now(),
                    "kind": kind,
                    "job_id": job_id,
                    "worker_id": worker_id,
                    "data": encoded,
                },
            )
        return int(rows[0][0])

    @boundary
    def retry(self, job_ids: Sequence[str]) -> list[Job | None]:
        results: list[Job | None] = []
        with self._write() as conn:
            now = self.now()
            for job_id in job_ids:
                try:
                    rows = rows_of(conn, OPERATOR_RETRY_SQL, {"id": job_id, "now": now})
                except apsw.ConstraintError:
                    job = self.get(job_id)
                    key = job.idempotency_key if job else "?"
                    raise IllegalTransition(
                        f"cannot retry job {job_id}: another unfinished job holds its "
                        f"idempotency key {key!r}"
                    ) from None
                results.append(row_to_job(rows[0]) if rows else None)
        return results

    @boundary
    def cancel(self, job_ids: Sequence[str]) -> list[Job | None]:
        results: list[Job | None] = []
        with self._write() as conn:
            now = self.now()
            for job_id in job_ids:
                params = {"id": job_id, "now": now}
                rows = rows_of(conn, CANCEL_WAITING_SQL, params)
                if not rows:
                    rows = rows_of(conn, REQUEST_CANCEL_SQL, params)
                results.append(row_to_job(rows[0]) if rows else None)
        return results

    @boundary
    def prune(self, *, before: int, statuses: Sequence[str] = (), types: Sequence[str] = ()) -> int:
        params: dict[str, Any] = {"before": before}
        filters = in_filter("status", statuses, "s", params) + in_filter("type", types, "t", params)
        with self._write() as conn:
            conn.execute(Q["prune"].replace("{filters}", filters), params)
            return int(conn.changes())

    # -- optional powers (jobcore.storage.powers) --------------------------------------

    def hub_store(self) -> HubStore:
        """The hub's state in this database file (`jobcore.storage.sqlite_hub`)."""
        from jobcore.storage.sqlite_hub import SQLiteHubStore

        return SQLiteHubStore(self.path, busy_timeout_ms=self.busy_timeout_ms)
