"""The hub's tokens and workers registry in the PostgreSQL store (`PostgresStorage.hub_store()`).

Implements the core's `HubStore` contract (`jobcore.storage.hub_state`) on the
storage's pool and schema (tables `hub_tokens`, `hub_workers`, created by the schema's
migrations), so several `jobcore serve` hubs on one database share tokens and
know each other's agents.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import psycopg

from jobcore.errors import IllegalTransition
from jobcore.models import Job
from jobcore.storage.hub_state import LIMITED_HASH, JobFilter, Page, TokenRecord, WorkerRecord
from jobcore_postgres.reads import select_jobs

if TYPE_CHECKING:
    from jobcore_postgres.storage import PostgresStorage

# limits read as JSON text: psycopg decodes a jsonb `null` to None, which reads as "any";
# as text it is damage, which reads as "none" (`grants.Limits.from_stored`)
_TOKEN_COLUMNS = "name, hash, scope, agent_id, created_at, revoked_at, types::text, queues::text"
_WORKER_COLUMNS = (
    "worker_id, name, cores, ram_gb, tags, types, registered_at, last_seen, lost_at, drain"
)


def _rows_until(conn: Any, sql: str, params: Any, deadline: float | None) -> list[Any] | None:
    """The statement's rows, or None when it was still running at `deadline` (cancelled by
    the server through `statement_timeout`, inside its scan)."""
    if deadline is None:
        rows: list[Any] = conn.execute(sql, params).fetchall()
        return rows
    left_ms = max(int((deadline - time.monotonic()) * 1000), 1)
    try:
        with conn.transaction():
            conn.execute(f"SET LOCAL statement_timeout = {left_ms}")
            rows = conn.execute(sql, params).fetchall()
            return rows
    except psycopg.errors.QueryCanceled:
        return None


def _like(text: str) -> str:
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


class PostgresHubStore:
    """`HubStore` beside the jobs, on the storage's own connections."""

    def __init__(self, storage: PostgresStorage) -> None:
        self.storage = storage
        self._tokens = storage._d.table("hub_tokens")
        self._workers = storage._d.table("hub_workers")

    def migrate(self) -> None:
        self.storage.migrate()  # the hub's tables are part of the schema's migrations

    def close(self) -> None:
        """Nothing of its own: the storage owns the connections."""

    def ping(self) -> None:
        with self.storage._connection() as conn:
            conn.execute("SELECT 1")

    # -- tokens ------------------------------------------------------------------

    def _token(self, row: Sequence[Any]) -> TokenRecord:
        return TokenRecord.from_row(row)

    def add_token(self, record: TokenRecord) -> None:
        try:
            with self.storage._write() as conn:
                conn.execute(
                    f"INSERT INTO {self._tokens} (name, hash, scope, agent_id, created_at, "
                    "types, queues) VALUES (%s, %s, %s, %s, %s, %s::jsonb, %s::jsonb)",
                    (
                        record.name,
                        record.hash,
                        record.scope,
                        record.agent_id,
                        record.created_at,
                        *record.limits.stored(),
                    ),
                )
        except IllegalTransition:
            raise
        except Exception as exc:
            if isinstance(exc.__cause__, psycopg.errors.UniqueViolation):
                raise IllegalTransition(
                    f"a token named {record.name!r} exists; revoke it first or choose another name"
                ) from None
            raise

    def token_by_hash(self, digest: str) -> TokenRecord | None:
        with self.storage._connection() as conn:
            row = conn.execute(
                f"SELECT {_TOKEN_COLUMNS} FROM {self._tokens} "
                "WHERE hash IN (%s, %s) AND revoked_at IS NULL",
                (digest, LIMITED_HASH + digest),
            ).fetchone()
        return None if row is None else self._token(row)

    def list_tokens(self) -> list[TokenRecord]:
        with self.storage._connection() as conn:
            rows = conn.execute(
                f"SELECT {_TOKEN_COLUMNS} FROM {self._tokens} ORDER BY id"
            ).fetchall()
        return [self._token(row) for row in rows]

    def revoke_token(self, name: str, now: int) -> bool:
        with self.storage._write() as conn:
            cursor = conn.execute(
                f"UPDATE {self._tokens} SET revoked_at = %s WHERE name = %s AND revoked_at IS NULL",
                (now, name),
            )
            return cursor.rowcount > 0

    # -- workers -----------------------------------------------------------------

    def upsert_worker(self, record: WorkerRecord) -> bool:
        with self.storage._write() as conn:
            row = conn.execute(
                f"INSERT INTO {self._workers} AS w (worker_id, name, cores, ram_gb, tags, types, "
                "registered_at, last_seen, lost_at, drain) "
                "VALUES (%(id)s, %(name)s, %(cores)s, %(ram)s, %(tags)s::jsonb, %(types)s::jsonb, "
                "%(now)s, %(now)s, NULL, false) "
                "ON CONFLICT (worker_id) DO UPDATE SET name = EXCLUDED.name, "
                "cores = EXCLUDED.cores, ram_gb = EXCLUDED.ram_gb, tags = EXCLUDED.tags, "
                "types = EXCLUDED.types, registered_at = EXCLUDED.registered_at, "
                "last_seen = EXCLUDED.last_seen, lost_at = NULL, drain = false "
                "RETURNING (xmax = 0)",  # true when the row was inserted, not updated
                {
                    "id": record.worker_id,
                    "name": record.name,
                    "cores": record.cores,
                    "ram": record.ram_gb,
                    "tags": json.dumps(record.tags),
                    "types": json.dumps(record.types),
                    "now": record.registered_at,
                },
            ).fetchone()
        return bool(row and row[0])

    def touch_workers(self, seen: dict[str, int]) -> list[str]:
        if not seen:
            return []
        ids, times = list(seen), list(seen.values())
        with self.storage._write() as conn:
            back = conn.execute(
                f"SELECT worker_id FROM {self._workers} "
                "WHERE worker_id = ANY(%s) AND lost_at IS NOT NULL ORDER BY worker_id FOR UPDATE",
                (ids,),
            ).fetchall()
            conn.execute(
                f"INSERT INTO {self._workers} AS w (worker_id, registered_at, last_seen) "
                "SELECT id, at, at FROM unnest(%s::text[], %s::bigint[]) AS v(id, at) "
                "ON CONFLICT (worker_id) DO UPDATE SET "
                "last_seen = greatest(w.last_seen, EXCLUDED.last_seen), lost_at = NULL",
                (ids, times),
            )
        return [row[0] for row in back]

    def set_drain(self, worker_id: str, drain: bool) -> bool:
        with self.storage._write() as conn:
            cursor = conn.execute(
                f"UPDATE {self._workers} SET drain = %s WHERE worker_id = %s", (drain, worker_id)
            )
            return cursor.rowcount > 0

    def mark_lost(self, before: int, now: int) -> list[str]:
        with self.storage._write() as conn:
            rows = conn.execute(
                f"UPDATE {self._workers} SET lost_at = %s "
                "WHERE lost_at IS NULL AND last_seen < %s RETURNING worker_id",
                (now, before),
            ).fetchall()
        return [str(row[0]) for row in rows]

    def list_workers(self) -> list[WorkerRecord]:
        with self.storage._connection() as conn:
            rows = conn.execute(
                f"SELECT {_WORKER_COLUMNS} FROM {self._workers} ORDER BY worker_id"
            ).fetchall()
        return [
            WorkerRecord(
                worker_id=row[0],
                name=row[1],
                cores=row[2],
                ram_gb=row[3],
                tags=list(row[4]),
                types=list(row[5]),
                registered_at=int(row[6]),
                last_seen=int(row[7]),
                lost_at=row[8],
                drain=bool(row[9]),
            )
            for row in rows
        ]

    # -- jobs ------------------------------------------------------------------------

    def search_jobs(
        self, where: JobFilter, *, before: str | None, limit: int, budget_ms: int = 200
    ) -> Page:
        """One page (`jobcore.storage.hub_state.Page`). Filters no index serves (type, queue,
        worker, q) walk down the ids in windows within `budget_ms`, a window still running
        at the deadline stopped by `statement_timeout` (the page then ends above it)."""
        from jobcore_postgres.rows import row_to_job

        params: dict[str, Any] = {}
        status = ""
        if where.statuses:
            params["status"] = list(where.statuses)
            status = " AND status = ANY(%(status)s::text[])"
        rest = []
        for column, values in (("type", where.types), ("queue", where.queues)):
            if values:
                params[column] = list(values)
                rest.append(f"{column} = ANY(%({column})s::text[])")
        if where.worker is not None:
            params["worker"] = where.worker
            rest.append("locked_by = %(worker)s")
        if where.q:
            params["like"] = _like(where.q)
            # search JSON columns for the query as JSON text: payload (json) keeps the
            # core's ASCII-escaped text (`caf\\u00e9`), errors (jsonb) escapes only `"` and `\\`
            params["like_payload"] = _like(json.dumps(where.q)[1:-1])
            params["like_errors"] = _like(json.dumps(where.q, ensure_ascii=False)[1:-1])
            rest.append(
                "(payload::text ILIKE %(like_payload)s OR errors::text ILIKE %(like_errors)s "
                "OR coalesce(last_error, '') ILIKE %(like)s)"
            )
        d = self.storage._d
        params["before"] = before
        below = " AND id < %(before)s" if before is not None else ""
        if not rest:  # ids (and statuses) only: one indexed read
            params["limit"] = limit + 1
            sql = select_jobs(d, f"WHERE true{status}{below}", "ORDER BY id DESC LIMIT %(limit)s")
            with self.storage._connection() as conn:
                jobs = [row_to_job(row) for row in conn.execute(sql, params).fetchall()]
            more = len(jobs) > limit
            return Page(jobs[:limit], jobs[limit - 1].id if more else None)
        conds = "".join(f" AND {cond}" for cond in rest)
        deadline = time.monotonic() + budget_ms / 1000
        found: list[Job] = []
        window, first = 1, True  # the first window (one id) always completes: progress
        while True:
            params["window"] = window
            started = time.monotonic()
            with self.storage._connection() as conn:
                low, count = conn.execute(
                    f"SELECT min(id), count(*) FROM (SELECT id FROM {d.table('jobs')}"
                    f" WHERE true{status}{below} ORDER BY id DESC LIMIT %(window)s) AS w",
                    params,
                ).fetchall()[0]
                if not count:
                    return Page(found[:limit], None)
                params["low"] = low
                params["limit"] = limit + 1 - len(found)
                sql = select_jobs(
                    d,
                    f"WHERE id >= %(low)s{below}{status}{conds}",
                    "ORDER BY id DESC LIMIT %(limit)s",
                )
                rows = _rows_until(conn, sql, params, None if first else deadline)
            if rows is None:  # stopped at the deadline: go on from this window's top
                return Page(found, params["before"])
            first = False
            found.extend(row_to_job(row) for row in rows)
            if len(found) > limit:
                return Page(found[:limit], found[limit - 1].id)
            if count < window:
                return Page(found, None)
            params["before"] = low
            below = " AND id < %(before)s"
            now = time.monotonic()
            if now >= deadline:
                return Page(found, low)
            if (now - started) * 4 < deadline - now:
                window = min(window * 2, 5000)

    def claims_by_worker(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        with self.storage._connection() as conn:
            rows = conn.execute(
                f"SELECT locked_by, id FROM {self.storage._d.table('jobs')}"
                " WHERE status = 'claimed'"
            ).fetchall()
        for worker, job_id in rows:
            out.setdefault(worker, []).append(job_id)
        return out

    def overdue_claims(self, now: int) -> list[Job]:
        from jobcore_postgres.rows import row_to_job

        sql = select_jobs(
            self.storage._d,
            "WHERE status = 'claimed' AND timeout_ms IS NOT NULL"
            " AND coalesce(started_at, claimed_at) + timeout_ms < %s",
        )
        with self.storage._connection() as conn:
            rows = conn.execute(sql, (now,)).fetchall()
        return [row_to_job(row) for row in rows]

    def jobs_by_id(self, ids: Sequence[str]) -> dict[str, Job]:
        from jobcore_postgres.rows import row_to_job

        if not ids:
            return {}
        with self.storage._connection() as conn:
            rows = conn.execute(
                select_jobs(self.storage._d, "WHERE id = ANY(%s)"), (list(dict.fromkeys(ids)),)
            ).fetchall()
        return {job.id: job for job in map(row_to_job, rows)}
