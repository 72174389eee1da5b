"""Async handlers that misbehave, and workers that die under them (DESIGN §15, §6)."""

from __future__ import annotations

import signal
from typing import Any

from async_workers import Workers
from testenv import wait_for

from jobcore import JobStatus


def enqueue(workers: Workers, **payload: Any) -> str:
    options = {k: payload.pop(k) for k in ("timeout", "max_attempts") if k in payload}
    return workers.queue.enqueue("async_job", {"log": workers.log, **payload}, **options).job.id


def test_a_handler_ignoring_cancellation_keeps_its_lease_for_the_grace_then_is_left(
    sqlite_workers: Workers,
) -> None:
    workers = sqlite_workers
    stubborn = enqueue(workers, how="ignore_cancel", sleep=600, timeout=0.5, max_attempts=1)
    workers.start("--async-concurrency", "1", JOBCORE_STOP_GRACE="3")
    wait_for(lambda: workers.noted("cancelled"), timeout=30)
    # asked to stop (cancelled) but not ended: the job stays claimed by this worker
    assert workers.queue.get(stubborn).status is JobStatus.CLAIMED
    wait_for(lambda: workers.queue.get(stubborn).status is JobStatus.FAILED, timeout=30)
    assert workers.noted("cancelled-again"), "cancelled again once its grace ran out"
    job = workers.queue.get(stubborn)
    assert job.last_error == "JobTimeout: timed out after 0.5s"
    # its slot was freed: with one async slot, the next job still runs
    after = enqueue(workers, sleep=0)
    wait_for(lambda: workers.queue.get(after).status is JobStatus.COMPLETED, timeout=30)
    output = workers.output()
    assert f"job {stubborn}: its async handler ignored cancellation" in output


def test_a_handler_blocking_the_loop_is_named_in_a_warning(sqlite_workers: Workers) -> None:
    workers = sqlite_workers
    quiet = enqueue(workers, sleep=30)
    blocker = enqueue(workers, how="block", sleep=2)
    proc = workers.start("--until-empty", JOBCORE_LOOP_BLOCK_WARNING="0.3")
    assert proc.wait(timeout=120) == 0, workers.output()
    output = workers.output()
    assert "the event loop of async handlers has not ticked for" in output
    warning = next(line for line in output.splitlines() if "has not ticked" in line)
    assert f"running now: job {blocker} (async_job)" in warning
    assert quiet not in warning
    assert workers.queue.get(blocker).status is JobStatus.COMPLETED
    assert output.count("has not ticked") == 1  # one warning per stall


def test_kill_9_mid_flight_charges_one_attempt_and_another_worker_completes(
    workers: Workers,
) -> None:
    ids = {enqueue(workers, first_sleep=600, sleep=0) for _ in range(10)}
    dying = workers.start("--lease", "2")
    wait_for(lambda: len(workers.noted("start")) == 10, timeout=60)
    dying.send_signal(signal.SIGKILL)
    dying.wait()
    rescuer = workers.start("--lease", "2")
    wait_for(
        lambda: all(workers.queue.get(i).status is JobStatus.COMPLETED for i in ids), timeout=60
    )
    rescuer.send_signal(signal.SIGTERM)
    assert rescuer.wait(timeout=60) == 0, workers.output()
    for job_id in ids:
        job = workers.queue.get(job_id)
        assert job.attempts == 2 and job.result == {"attempt": 2, "async": True}
        assert [e["attempt"] for e in job.errors] == [1]
        assert "lease expired" in job.errors[0]["error"]


def test_a_crashing_async_handler_is_charged_per_crash_until_it_fails(workers: Workers) -> None:
    job_id = enqueue(workers, how="crash", max_attempts=2)
    for _ in range(2):
        proc = workers.start("--lease", "1")
        proc.wait(timeout=60)
        assert proc.returncode == 3
    sweeper = workers.start("--lease", "1")  # its sweep fails the job: attempts exhausted
    wait_for(lambda: workers.queue.get(job_id).status is JobStatus.FAILED, timeout=60)
    sweeper.send_signal(signal.SIGTERM)
    assert sweeper.wait(timeout=60) == 0
    job = workers.queue.get(job_id)
    assert job.attempts == 2
    assert [e["attempt"] for e in job.errors] == [1, 2]
    assert len(workers.noted("start")) == 2


def test_system_exit_in_an_async_handler_fails_its_attempt_not_the_loop(
    sqlite_workers: Workers,
) -> None:
    workers = sqlite_workers
    exits = enqueue(workers, how="exit", max_attempts=1)
    fine = [enqueue(workers, sleep=0.1) for _ in range(5)]
    proc = workers.start("--until-empty", "--async-concurrency", "2")
    assert proc.wait(timeout=60) == 0, workers.output()
    job = workers.queue.get(exits)
    assert (job.status, job.last_error) == (JobStatus.FAILED, "SystemExit: 3")
    assert all(workers.queue.get(i).status is JobStatus.COMPLETED for i in fine)
