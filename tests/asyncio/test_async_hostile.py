"""Async handlers that attack the worker's event loop itself (DESIGN §15, §6)."""

from __future__ import annotations

import asyncio
import signal
from typing import Any, cast

from async_workers import Workers
from testenv import wait_for

from jobcore import JobStatus
from jobcore.async_loop import LoopThread
from jobcore.attempt import AttemptRunner


def enqueue(workers: Workers, **payload: Any) -> str:
    options = {k: payload.pop(k) for k in ("timeout", "max_attempts") if k in payload}
    return workers.queue.enqueue("async_job", {"log": workers.log, **payload}, **options).job.id


def test_generator_exit_in_an_async_handler_fails_its_attempt(sqlite_workers: Workers) -> None:
    workers = sqlite_workers
    raiser = enqueue(workers, how="generator_exit", max_attempts=1)
    fine = [enqueue(workers, sleep=0.1) for _ in range(3)]
    proc = workers.start("--until-empty")
    assert proc.wait(timeout=60) == 0, workers.output()
    job = workers.queue.get(raiser)
    assert (job.status, job.last_error) == (JobStatus.FAILED, "GeneratorExit")
    assert all(workers.queue.get(i).status is JobStatus.COMPLETED for i in fine)


def test_a_handler_stopping_the_loop_does_not_end_it(sqlite_workers: Workers) -> None:
    workers = sqlite_workers
    sleeper = enqueue(workers, sleep=1.5)
    stopper = enqueue(workers, how="stop_loop", sleep=0.5)
    later = [enqueue(workers, sleep=0) for _ in range(3)]  # claimed once a slot is free
    proc = workers.start("--until-empty", "--async-concurrency", "2")
    assert proc.wait(timeout=60) == 0, workers.output()
    for job_id in (sleeper, stopper, *later):  # none cancelled, none left claimed
        job = workers.queue.get(job_id)
        assert (job.status, job.attempts) == (JobStatus.COMPLETED, 1), job
    assert "a handler stopped the event loop of async handlers" in workers.output()


def test_shutdown_past_a_stubborn_handler_releases_it_without_false_errors(
    sqlite_workers: Workers,
) -> None:
    workers = sqlite_workers
    stubborn = [enqueue(workers, how="ignore_cancel", sleep=600) for _ in range(3)]
    proc = workers.start("--shutdown-timeout", "0.5", JOBCORE_STOP_GRACE="1")
    wait_for(lambda: len(workers.noted("start")) == 3, timeout=30)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, workers.output()
    for job_id in stubborn:
        job = workers.queue.get(job_id)
        assert (job.status, job.attempts) == (JobStatus.PENDING, 0), job
    output = workers.output()
    # the loop closing its left-behind coroutines is not an error of their handlers
    assert "raised GeneratorExit" not in output
    assert "Exception ignored" not in output


def test_a_child_enqueued_after_the_handler_returned_is_refused_not_lost(
    sqlite_workers: Workers,
) -> None:
    workers = sqlite_workers
    parent = enqueue(workers, how="late_child")
    proc = workers.start()
    wait_for(lambda: workers.noted("late-child-refused") or workers.noted("late-child-taken"))
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, workers.output()
    assert workers.queue.get(parent).status is JobStatus.COMPLETED
    # the task it left behind heard that its child cannot be committed any more
    assert [line[4:] for line in workers.noted("late-child-refused")] == [["JobcoreError"]]


def test_the_agents_loop_thread_runs_on_after_a_handler_stopped_it() -> None:
    loop_thread = LoopThread(cast(AttemptRunner, None))
    loop = loop_thread._running_loop()

    async def stop_then_answer() -> str:
        asyncio.get_running_loop().stop()  # what a misbehaving handler may do
        await asyncio.sleep(0.05)
        return "answered"

    assert asyncio.run_coroutine_threadsafe(stop_then_answer(), loop).result(10) == "answered"

    async def later() -> int:
        return 7

    assert asyncio.run_coroutine_threadsafe(later(), loop).result(10) == 7
