"""The schedulers' shared record in the job store: how far each schedule has been run.

Two tables beside the jobs (SQLite: in the same file; PostgreSQL: in the same schema):

* `cron_schedules(name, last_at, …)`: the high-water mark, the latest scheduled
  time (ms UTC) some scheduler has dealt with (run, or skipped by the policy).
  A tick moves it with a compare-and-set (`WHERE last_at = <what it read>`).
* `cron_runs(schedule, scheduled_at, job_id, enqueued_at)`, primary key
  `(schedule, scheduled_at)`: one row per enqueued run. Written in the
  transaction that enqueues the job, so a second scheduler's insert for the same
  time finds the row and its whole transaction (job included) rolls back.

Only the newest `KEEP_RUNS` rows per schedule are kept; older times are below
the high-water mark, which already keeps them from running again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

KEEP_RUNS = 100


@dataclass(frozen=True)
class State:
    name: str
    last_at: int
    last_job_id: str | None
    last_enqueued_at: int | None
    runs: int


@dataclass(frozen=True)
class Run:
    schedule: str
    scheduled_at: int
    job_id: str
    enqueued_at: int
    job_status: str | None = None  # as `latest_of` read it with the run; None: no such job


class Lost(Exception):
    """Another scheduler dealt with these times first: roll this transaction back."""


class CronStore:
    """SQL for the two tables on the store's own connection (SQLite or PostgreSQL)."""

    def __init__(self, storage: Any) -> None:
        self.postgres = hasattr(storage, "schema") and not hasattr(storage, "path")
        schema = getattr(storage, "schema", None) if self.postgres else None
        prefix = f'"{schema}".' if schema else ""
        self.schedules = f"{prefix}cron_schedules"
        self.runs = f"{prefix}cron_runs"
        self.jobs = f"{prefix}jobs"

    def _sql(self, text: str) -> str:
        """Write statements with `:name` parameters; psycopg wants `%(name)s`."""
        if not self.postgres:
            return text
        return re.sub(r":([a-z_]+)", r"%(\1)s", text)

    def _exec(self, conn: Any, text: str, params: dict[str, Any] | None = None) -> Any:
        return conn.execute(self._sql(text), params or {})

    def _changed(self, conn: Any, cursor: Any) -> int:
        return int(cursor.rowcount) if self.postgres else int(conn.changes())

    def create(self, conn: Any) -> None:
        """Create the tables if missing (inside a write transaction)."""
        if self.postgres:  # concurrent CREATE IF NOT EXISTS can collide in the catalog
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('jobcore_cron'))")
        big = "BIGINT" if self.postgres else "INTEGER"
        self._exec(
            conn,
            f"CREATE TABLE IF NOT EXISTS {self.schedules} ("
            f"name TEXT PRIMARY KEY, last_at {big} NOT NULL, last_job_id TEXT, "
            f"last_enqueued_at {big}, runs {big} NOT NULL DEFAULT 0)",
        )
        self._exec(
            conn,
            f"CREATE TABLE IF NOT EXISTS {self.runs} ("
            f"schedule TEXT NOT NULL, scheduled_at {big} NOT NULL, job_id TEXT NOT NULL, "
            f"enqueued_at {big} NOT NULL, PRIMARY KEY (schedule, scheduled_at))",
        )

    def exists(self, conn: Any) -> bool:
        if self.postgres:
            row = conn.execute("SELECT to_regclass(%s)", (self.schedules,)).fetchone()
            return row is not None and row[0] is not None
        row = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'cron_schedules'"
        ).fetchone()
        return row is not None

    def state(self, conn: Any, name: str, *, lock: bool = False) -> State | None:
        text = (
            f"SELECT name, last_at, last_job_id, last_enqueued_at, runs FROM {self.schedules} "
            "WHERE name = :name"
        )
        if lock and self.postgres:
            text += " FOR UPDATE"
        row = self._exec(conn, text, {"name": name}).fetchone()
        return State(*row) if row is not None else None

    def states(self, conn: Any) -> dict[str, State]:
        rows = self._exec(
            conn,
            f"SELECT name, last_at, last_job_id, last_enqueued_at, runs FROM {self.schedules}",
        ).fetchall()
        return {row[0]: State(*row) for row in rows}

    def start(self, conn: Any, name: str, last_at: int) -> bool:
        """Record a schedule seen for the first time; False if another scheduler did."""
        cursor = self._exec(
            conn,
            f"INSERT INTO {self.schedules} (name, last_at) VALUES (:name, :last_at) "
            "ON CONFLICT (name) DO NOTHING",
            {"name": name, "last_at": last_at},
        )
        return self._changed(conn, cursor) == 1

    def advance(self, conn: Any, old: State, last_at: int, runs: list[Run]) -> None:
        """Move the mark from `old.last_at` to `last_at` and record `runs`; `Lost` if another
        scheduler moved it or recorded one of these times first."""
        latest = runs[-1] if runs else None
        cursor = self._exec(
            conn,
            f"UPDATE {self.schedules} SET last_at = :last_at, "
            "last_job_id = COALESCE(:job_id, last_job_id), "
            "last_enqueued_at = COALESCE(:enqueued_at, last_enqueued_at), runs = runs + :count "
            "WHERE name = :name AND last_at = :old",
            {
                "name": old.name,
                "old": old.last_at,
                "last_at": last_at,
                "job_id": latest.job_id if latest else None,
                "enqueued_at": latest.enqueued_at if latest else None,
                "count": len(runs),
            },
        )
        if self._changed(conn, cursor) != 1:
            raise Lost(old.name)
        for run in runs:
            cursor = self._exec(
                conn,
                f"INSERT INTO {self.runs} (schedule, scheduled_at, job_id, enqueued_at) "
                "VALUES (:schedule, :scheduled_at, :job_id, :enqueued_at) "
                "ON CONFLICT (schedule, scheduled_at) DO NOTHING",
                {
                    "schedule": run.schedule,
                    "scheduled_at": run.scheduled_at,
                    "job_id": run.job_id,
                    "enqueued_at": run.enqueued_at,
                },
            )
            if self._changed(conn, cursor) != 1:
                raise Lost(old.name)
        if runs:
            self._exec(
                conn,
                f"DELETE FROM {self.runs} WHERE schedule = :name AND scheduled_at < ("
                f"SELECT MIN(scheduled_at) FROM (SELECT scheduled_at FROM {self.runs} "
                "WHERE schedule = :name ORDER BY scheduled_at DESC LIMIT :keep) AS newest)",
                {"name": old.name, "keep": KEEP_RUNS},
            )

    def latest(self, conn: Any) -> dict[str, tuple[State, Run | None]]:
        """Each recorded schedule's state and its newest run (none if the tables are missing)."""
        if not self.exists(conn):
            return {}
        return latest_of(
            lambda sql: self._exec(conn, sql).fetchall(), self.schedules, self.runs, self.jobs
        )

    def recent_runs(self, conn: Any, name: str, limit: int = 10) -> list[Run]:
        rows = self._exec(
            conn,
            f"SELECT schedule, scheduled_at, job_id, enqueued_at FROM {self.runs} "
            "WHERE schedule = :name ORDER BY scheduled_at DESC LIMIT :limit",
            {"name": name, "limit": limit},
        ).fetchall()
        return [Run(*row) for row in rows]


def read_latest(storage: Any, transaction: Any) -> dict[str, tuple[State, Run | None]]:
    """`CronStore.latest` for a reader such as `jobcore schedules`: on SQLite through a
    connection of its own outside any transaction, so it never waits for (or takes) the
    write lock; on PostgreSQL in `transaction()`, which locks nothing it reads."""
    store = CronStore(storage)
    if store.postgres:
        with transaction() as conn:
            return store.latest(conn)
    import apsw

    from jobcore.storage.sqlite_connect import open_connection
    from jobcore.storage.sqlite_errors import storage_error

    conn = open_connection(storage.path, "NORMAL", storage.busy_timeout_ms)
    try:
        return store.latest(conn)
    except apsw.Error as exc:
        raise storage_error(exc, storage.path, storage.busy_timeout_ms) from exc
    finally:
        conn.close()


def latest_of(
    rows: Any, schedules: str = "cron_schedules", runs: str = "cron_runs", jobs: str = "jobs"
) -> dict[str, tuple[State, Run | None]]:
    """`latest` through `rows(sql) -> list of tuples` (e.g. the dashboard's read-only reader,
    whose connection's search path is the store's schema): one statement for every
    schedule, with the status of each newest run's job."""
    found: dict[str, tuple[State, Run | None]] = {}
    for row in rows(
        "SELECT s.name, s.last_at, s.last_job_id, s.last_enqueued_at, s.runs, "
        "r.scheduled_at, r.job_id, r.enqueued_at, j.status "
        f"FROM {schedules} AS s LEFT JOIN {runs} AS r ON r.schedule = s.name AND "
        f"r.scheduled_at = (SELECT MAX(scheduled_at) FROM {runs} WHERE schedule = s.name) "
        f"LEFT JOIN {jobs} AS j ON j.id = r.job_id"
    ):
        state = State(*row[:5])
        run = Run(row[0], row[5], row[6], row[7], row[8]) if row[5] is not None else None
        found[state.name] = (state, run)
    return found
