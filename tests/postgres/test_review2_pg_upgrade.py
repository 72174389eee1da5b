"""Review: upgrading a version-2 PostgreSQL store while its older workers keep writing."""

from __future__ import annotations

import threading
import time

import psycopg
from jobcore_postgres.schema import MIGRATIONS, SCHEMA_VERSION, stored_version
from jobcore_postgres.storage import PostgresStorage


def test_review2_migrating_while_old_workers_write_does_not_deadlock(
    pg_database: str, pg_schema: str
) -> None:
    s = pg_schema
    with psycopg.connect(pg_database, autocommit=True) as conn, conn.transaction():
        for _, script in MIGRATIONS[:2]:
            conn.execute(script.format(s=s).encode())
        conn.execute(f"UPDATE {s}.schema_version SET version = 2")
        conn.execute(
            f"INSERT INTO {s}.jobs (id, type, payload, status, max_attempts, run_at, "
            "created_at, updated_at) VALUES ('j1', 't', '{}', 'claimed', 3, 0, 0, 0)"
        )
    stop = threading.Event()
    failures: list[BaseException] = []

    def old_worker() -> None:
        """A version-2 worker's group commit: its jobs row first, then its event."""
        with psycopg.connect(pg_database, autocommit=True) as conn:
            while not stop.is_set():
                try:
                    with conn.transaction():
                        conn.execute(f"UPDATE {s}.jobs SET updated_at = updated_at + 1")
                        time.sleep(0.05)
                        conn.execute(f"INSERT INTO {s}.events (at, kind) VALUES (0, 'job:x')")
                except psycopg.Error as exc:
                    failures.append(exc)

    workers = [threading.Thread(target=old_worker, daemon=True) for _ in range(3)]
    for thread in workers:
        thread.start()
    time.sleep(0.3)
    storage = PostgresStorage(f"{pg_database}?schema={s}")
    try:
        storage.migrate()  # was: StorageBusy "deadlock detected" (the migration lost)
    finally:
        stop.set()
        for thread in workers:
            thread.join(10)
        storage.close()
    assert failures == []
    with psycopg.connect(pg_database, autocommit=True) as conn:
        assert stored_version(conn, s) == SCHEMA_VERSION
