"""Review of the PostgreSQL wake path: work that appears without a waking notification.

Workers here poll once an hour, so a job they start within seconds was found
because a notification (or a listener reconnect) woke them.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import jobcore_postgres
import jobcore_test_plugin as tp
import psycopg
import pytest
from jobcore_postgres.copy import copy_jobs
from jobcore_postgres.storage import PostgresStorage
from jobcore_postgres.url import parse_url
from testenv import subprocess_env, wait_for

from jobcore import JobStatus, Queue, Worker
from jobcore.errors import ConfigError
from jobcore.testing import make_queue

Factory = Callable[..., PostgresStorage]
HOUR = 3600.0
JOBCORE = [sys.executable, "-m", "jobcore"]


@pytest.fixture
def queue(pg_url: str) -> Iterator[Queue]:
    queue = make_queue(pg_url, jobcore_postgres, tp, poll_interval=HOUR, wake_check_interval=HOUR)
    queue.storage.migrate()
    yield queue
    queue.close()


def start_idle_worker(queue: Queue) -> tuple[Worker, threading.Thread]:
    worker = Worker(queue, lease=HOUR)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    wait_for(lambda: worker.keeper.swept_once and queue.storage.pushes_changes, timeout=30)
    time.sleep(0.2)  # let the wake-up of the first sweep pass
    return worker, thread


def test_review2_jobs_copied_into_postgres_wake_an_idle_worker(
    queue: Queue, tmp_path: Path
) -> None:
    source = make_queue(str(tmp_path / "source.db"), tp)
    source.storage.migrate()
    job = source.enqueue("record", {"log": str(tmp_path / "ran.log")}).job
    worker, thread = start_idle_worker(queue)
    try:
        assert copy_jobs(source.storage, queue.storage) == 1  # what `jobcore copy` does
        wait_for(lambda: queue.get(job.id).status is JobStatus.COMPLETED, timeout=10)
    finally:
        worker.stop()
        thread.join(10)
        source.close()


def _listener_pids(conninfo: str, channel: str) -> list[int]:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND query = %s AND pid <> pg_backend_pid()",
            (f"LISTEN {channel}",),
        ).fetchall()
    return [int(row[0]) for row in rows]


def test_review2_worker_process_hears_jobs_enqueued_right_after_its_listener_is_killed(
    pg_url: str, pg_storage_factory: Factory, tmp_path: Path
) -> None:
    storage = pg_storage_factory()
    channel = f"{storage.schema}_changes"
    log = tmp_path / "ran.log"
    with open(tmp_path / "worker.log", "wb") as out:
        proc = subprocess.Popen(
            [*JOBCORE, "run", "--poll-interval", str(HOUR)],
            env=subprocess_env(JOBCORE_DB=pg_url),
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        queue = make_queue(pg_url, jobcore_postgres, tp)
        try:
            first = queue.enqueue("record", {"log": str(log)}).job
            wait_for(lambda: queue.get(first.id).status is JobStatus.COMPLETED, timeout=30)
            for round_ in range(3):
                [pid] = wait_for(lambda: _listener_pids(storage.target.conninfo, channel), 30)
                time.sleep(0.3)  # the worker is back in its wait
                with psycopg.connect(storage.target.conninfo, autocommit=True) as conn:
                    conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
                if round_ == 2:
                    time.sleep(0.02)  # around the reconnect
                job = queue.enqueue("record", {"log": str(log)}).job  # the worst moment
                wait_for(lambda: queue.get(job.id).status is JobStatus.COMPLETED, timeout=10)
        finally:
            queue.close()
    finally:
        proc.kill()
        proc.wait()


def test_review2_every_schema_name_the_url_accepts_is_a_working_store(pg_database: str) -> None:
    # the channel `<schema>_changes` must fit PostgreSQL's 63-character names: with a
    # longer one pg_notify raised "channel name too long" in every event-appending write
    longest = "r2" + "x" * 53
    with pytest.raises(ConfigError, match="at most 55"):
        parse_url(f"{pg_database}?schema={longest}x")
    queue = make_queue(f"{pg_database}?schema={longest}", jobcore_postgres, tp)
    try:
        queue.storage.migrate()
        job = queue.enqueue("record", {"log": "/dev/null"}).job
        assert queue.get(job.id).status is JobStatus.PENDING
    finally:
        queue.close()
        with psycopg.connect(pg_database, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {longest} CASCADE")
