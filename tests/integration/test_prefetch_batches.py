"""A prefetching worker that has a round of jobs waiting claims in batches of at least half
its prefetch room, not one job per finished job: fewer, larger claims (each claim statement
costs the store the same whatever its size; on PostgreSQL it was a tenth of the drain).
A worker with async slots claims into them apart: its sync prefetch never holds them back."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable

import jobcore_test_plugin as tp

from jobcore import JobContext, JobStatus, JobType, Payload, Queue, Worker, hookimpl


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


class Seconds(Payload):
    seconds: float = 0.0


async def asleep(payload: Seconds, ctx: JobContext) -> float:
    await asyncio.sleep(payload.seconds)
    return time.monotonic()


def ssleep(payload: Seconds, ctx: JobContext) -> float:
    time.sleep(payload.seconds)
    return time.monotonic()


class SleepBothWays:
    @hookimpl
    def jobcore_register_job_types(self, register: Callable[[JobType], None]) -> None:
        register(JobType(name="asleep", payload_model=Seconds, handler=asleep))
        register(JobType(name="ssleep", payload_model=Seconds, handler=ssleep))


def test_async_jobs_are_not_held_back_by_waiting_sync_ones(
    jobcore_make_queue: Callable[..., Queue],
) -> None:
    queue = jobcore_make_queue(SleepBothWays(), prefetch_below=10.0, prefetch_wait=60.0)
    sync_ids, async_ids = [], []
    for _ in range(200):  # 200 x 20 ms on 1 thread: ~4 s; 200 x 200 ms on 20 slots: ~2 s
        sync_ids.append(queue.enqueue("ssleep", {"seconds": 0.02}).job.id)
        async_ids.append(queue.enqueue("asleep", {"seconds": 0.2}).job.id)
    worker = Worker(queue, concurrency=1, prefetch=8, async_concurrency=20, until_empty=True)
    began = time.monotonic()
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the worker did not finish"
    last_async = max(queue.get(i).result for i in async_ids) - began
    last_sync = max(queue.get(i).result for i in sync_ids) - began
    assert last_async < 0.75 * last_sync, (last_async, last_sync)
