"""Review of the PostgreSQL wake path: work that appears without a waking notification.

Workers here poll once an hour, so a job they start within seconds was found
because a notification (or a listener reconnect) woke them.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import jobcore_postgres
import jobcore_test_plugin as tp
import psycopg
import pytest
from jobcore_postgres.copy import copy_jobs
from jobcore_postgres.storage import PostgresStorage
from jobcore_postgres.url import parse_url
from pg_testing import HOUR, start_idle_worker
from testenv import subprocess_env, wait_for

from jobcore import JobStatus, Queue
from jobcore.errors import ConfigError
from jobcore.testing import make_queue

Factory = Callable[..., PostgresStorage]
JOBCORE = [sys.executable, "-m", "jobcore"]


@pytest.fixture
def queue(idle_queue: Queue) -> Queue:
    return idle_queue  # conftest: workers poll hourly


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
                wait_for(lambda j=job: queue.get(j.id).status is JobStatus.COMPLETED, timeout=10)
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


def test_review2_worker_process_hears_every_transition_that_makes_work(
    pg_url: str, pg_storage_factory: Factory, tmp_path: Path
) -> None:
    """Retries with a delay, children, an operator retry, a sweep by another process and an
    outbox commit each make work that an idle worker (polling hourly) must start soon."""
    storage = pg_storage_factory()
    env = subprocess_env(JOBCORE_DB=pg_url)
    with open(tmp_path / "worker.log", "wb") as out:
        proc = subprocess.Popen(
            [*JOBCORE, "run", "--poll-interval", str(HOUR)],
            env=env,
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    queue = make_queue(pg_url, jobcore_postgres, tp)

    def status(job_id: str) -> JobStatus:
        return queue.get(job_id).status

    try:
        warm = queue.enqueue("record", {"log": str(tmp_path / "ran.log")}).job
        wait_for(lambda: status(warm.id) is JobStatus.COMPLETED, timeout=30)
        time.sleep(0.3)
        # a retry one second later: due by the worker's own timer, set when it heard of it
        retried = queue.enqueue(
            "fail", {"how": "retry_after", "seconds": 1, "message": "x"}, max_attempts=2
        ).job
        wait_for(lambda: status(retried.id) is JobStatus.FAILED, timeout=10)
        assert queue.get(retried.id).attempts == 2
        # children enqueued along with their parent's completion
        parent = queue.enqueue("parent", {"children": 2}).job
        wait_for(lambda: status(parent.id) is JobStatus.COMPLETED, timeout=10)
        children = [j for j in queue.list_jobs(limit=100) if j.parent_id == parent.id]
        assert len(children) == 2
        for child in children:
            wait_for(lambda c=child: status(c.id) is JobStatus.COMPLETED, timeout=10)
        # an operator's retry, from another process
        time.sleep(0.3)
        done = subprocess.run(
            [*JOBCORE, "retry", retried.id], env=env, cwd=tmp_path, capture_output=True
        )
        assert done.returncode == 0, done.stderr
        wait_for(
            lambda: queue.get(retried.id).attempts == 2 and len(queue.get(retried.id).errors) >= 3,
            timeout=10,
        )
        # a lease expired on a worker that died: released by `jobcore sweep` elsewhere
        ghost_job = queue.build("record", {"log": str(tmp_path / "ran.log")})
        other = pg_storage_factory()
        with other.transaction():  # claimed in the transaction that made it: never pending
            other.insert([ghost_job])
            [_ghost] = other.claim(worker="ghost", limit=1, lease_ms=1)
        time.sleep(0.3)  # its lease has expired; the live worker heard only that commit
        swept_env = {**env, "JOBCORE_LEASE": "1s"}  # it confirms over lease/4 + 1s
        done = subprocess.run([*JOBCORE, "sweep"], env=swept_env, cwd=tmp_path, capture_output=True)
        assert done.returncode == 0, done.stderr
        wait_for(lambda: status(ghost_job.id) is JobStatus.COMPLETED, timeout=10)
        # the outbox: a job inserted on the application's own connection
        with psycopg.connect(storage.target.conninfo) as app, app.transaction():
            outboxed = queue.enqueue("record", {"log": str(tmp_path / "ran.log")}, conn=app).job
        wait_for(lambda: status(outboxed.id) is JobStatus.COMPLETED, timeout=10)
    finally:
        queue.close()
        proc.kill()
        proc.wait()
