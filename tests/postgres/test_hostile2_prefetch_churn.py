"""A worker on PostgreSQL (default prefetch 100) claims no more short jobs than its
executors start within `prefetch_wait`: beyond that they were given back and claimed
again (a `job:released` event, an INFO line and a durable start each), churn, not speed."""

from __future__ import annotations

import threading
from pathlib import Path

import jobcore_postgres
import jobcore_test_plugin
from testenv import wait_for

from jobcore import Worker
from jobcore.testing import make_queue


def test_a_one_slot_worker_gives_back_none_of_its_prefetched_30ms_jobs(
    pg_url: str, tmp_path: Path
) -> None:
    queue = make_queue(pg_url, jobcore_postgres, jobcore_test_plugin)
    log = str(tmp_path / "runs.log")
    worker = Worker(queue, concurrency=1)
    thread = threading.Thread(target=worker.run, daemon=True)
    try:
        assert worker.prefetch == 100  # the store's default: 100 x 30 ms > prefetch_wait 1 s
        thread.start()
        # a few first, so the worker knows its attempts are short (it then prefetches)
        queue.enqueue_many("record", [{"log": log, "sleep": 0.03}] * 3)
        wait_for(lambda: queue.storage.count_by_status() == {"completed": 3}, timeout=30)
        queue.enqueue_many("record", [{"log": log, "sleep": 0.03}] * 120)
        wait_for(lambda: queue.storage.count_by_status() == {"completed": 123}, timeout=60)
        kinds = [e.kind for e in queue.storage.events_after(0, 10_000)]
        # unbounded, about 120 were given back; a machine under load may delay a few
        assert kinds.count("job:released") <= 10, (
            f"{kinds.count('job:released')} prefetched jobs waited over prefetch_wait and "
            "were given back"
        )
        assert kinds.count("job:claimed") == 123 + kinds.count("job:released")
    finally:
        worker.stop()
        thread.join(30)
        queue.close()
