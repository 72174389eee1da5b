"""A prefetching worker that has a round of jobs waiting claims in batches of at least half
its prefetch room, not one job per finished job: fewer, larger claims (each claim statement
costs the store the same whatever its size; on PostgreSQL it was a tenth of the drain)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

import jobcore_test_plugin as tp

from jobcore import JobStatus, Queue, Worker


def test_a_worker_with_jobs_waiting_claims_half_its_room_at_a_time(
    jobcore_make_queue: Callable[..., Queue],
) -> None:
    queue = jobcore_make_queue(tp, prefetch_below=10.0, prefetch_wait=60.0)
    ids = [queue.enqueue("sleepy", {"seconds": 0.01}).job.id for _ in range(60)]
    worker = Worker(queue, concurrency=1, prefetch=8, until_empty=True)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the worker did not finish"
    jobs = [queue.get(job_id) for job_id in ids]
    assert all(job is not None and job.status is JobStatus.COMPLETED for job in jobs)
    # one claim statement stamps its jobs with one `claimed_at`
    sizes = sorted(Counter(job.claimed_at for job in jobs if job is not None).values())
    # the first claims ramp up (no pace known yet); once 8 wait beyond the executor, each
    # claim waits for 4 free places: about 60 / 4 claims, never one per job
    assert len(sizes) <= 20, sizes
    assert sum(size >= 4 for size in sizes) >= 10, sizes
