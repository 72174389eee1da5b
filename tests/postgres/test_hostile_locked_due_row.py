"""A due scheduled job that another transaction holds locked cannot be promoted (the
promotion skips locked rows): an idle worker must not spin on it, one claim after another."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest
from pg_testing import count_calls, start_idle_worker
from testenv import wait_for

from jobcore import JobStatus, Queue


@pytest.fixture
def queue(idle_queue: Queue) -> Queue:
    return idle_queue  # conftest: workers poll hourly


def test_an_idle_worker_does_not_spin_on_a_locked_due_job(queue: Queue) -> None:
    counts = count_calls(queue.storage, "commit_batch")
    worker, thread = start_idle_worker(queue)
    storage: Any = queue.storage
    try:
        job = queue.enqueue("noop", {}, delay=0.3).job
        with psycopg.connect(storage.target.conninfo) as locker:
            locker.execute(
                f"SELECT 1 FROM {storage.schema}.jobs WHERE id = %s FOR UPDATE", (job.id,)
            )
            time.sleep(0.6)  # due now, and locked
            before = counts["commit_batch"]
            time.sleep(2.0)
            during = counts["commit_batch"] - before
            locker.rollback()
        # once the lock is gone it is promoted and runs without waiting for the hourly poll
        wait_for(lambda: queue.get(job.id).status is JobStatus.COMPLETED, timeout=10)
    finally:
        worker.stop()
        thread.join(10)
    assert during < 200, f"{during} group commits in 2 s while the due job was locked"
