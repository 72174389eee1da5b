"""`async def` handlers in real `jobcore run` processes on SQLite and PostgreSQL (DESIGN §15)."""

from __future__ import annotations

import signal
from typing import Any

import pytest
from async_workers import Workers
from testenv import wait_for

from jobcore import Config, ConfigError, JobcoreError, JobStatus, Worker


def overlap(notes: list[list[str]], ids: set[str]) -> int:
    """The most of `ids` that had started and not yet ended at once."""
    running = most = 0
    for line in notes:
        if line[1] not in ids:
            continue
        if line[0] == "start":
            running += 1
            most = max(most, running)
        elif line[0] == "end":
            running -= 1
    return most


def enqueue(workers: Workers, type: str = "async_job", **payload: Any) -> str:
    options = {k: payload.pop(k) for k in ("timeout", "max_attempts") if k in payload}
    return workers.queue.enqueue(type, {"log": workers.log, **payload}, **options).job.id


def test_outcomes_of_async_handlers_beside_sync_ones_in_one_worker(workers: Workers) -> None:
    async_ids = {enqueue(workers, sleep=0.3) for _ in range(30)}
    sync_ids = {enqueue(workers, "sync_job", sleep=0.05) for _ in range(4)}
    failing = enqueue(workers, how="error")
    failing_sync = enqueue(workers, "sync_job", how="error")
    permanent = enqueue(workers, how="permanent")
    later = enqueue(workers, how="retry_after")
    parent = enqueue(workers, how="child")
    proc = workers.start(
        "--until-empty", "--concurrency", "2", "--async-concurrency", "20", "--backoff-base", "0"
    )
    assert proc.wait(timeout=120) == 0, workers.output()
    queue = workers.queue
    for job_id in async_ids | sync_ids:
        job = queue.get(job_id)
        assert job.status is JobStatus.COMPLETED, (job, workers.output())
        assert job.result == {"attempt": 1, "async": job_id in async_ids}
    notes = workers.notes()
    # more async handlers at once than there are executor threads, never more than the setting
    assert 2 < overlap(notes, async_ids) <= 20
    assert overlap(notes, sync_ids) <= 2
    failed, failed_sync = queue.get(failing), queue.get(failing_sync)
    assert (failed.status, failed.attempts) == (JobStatus.FAILED, 3)
    assert failed.last_error == "ValueError: async handler failed as asked"
    # the history has the sync path's shape
    assert [sorted(e) for e in failed.errors] == [sorted(e) for e in failed_sync.errors]
    assert [e["attempt"] for e in failed.errors] == [1, 2, 3]
    gave_up = queue.get(permanent)
    assert (gave_up.status, gave_up.attempts) == (JobStatus.FAILED, 1)
    assert gave_up.last_error == "PermanentError: async handler gave up as asked"
    [child] = [j for j in queue.storage.list_jobs(limit=100) if j.parent_id == parent]
    assert (child.type, child.status) == ("noop", JobStatus.COMPLETED)
    waiting = queue.get(later)
    assert waiting.status is JobStatus.SCHEDULED
    assert 29_000 <= waiting.run_at - waiting.updated_at <= 31_000


def test_a_timeout_cancels_the_awaiting_handler_at_once(workers: Workers) -> None:
    job_id = enqueue(workers, sleep=600, timeout=0.5, max_attempts=1)
    proc = workers.start("--until-empty")
    assert proc.wait(timeout=60) == 0, workers.output()
    job = workers.queue.get(job_id)
    assert (job.status, job.last_error) == (JobStatus.FAILED, "JobTimeout: timed out after 0.5s")
    assert [line[4:] for line in workers.noted("cancelled")] == [["timeout", "True"]]


def test_a_cancel_request_cancels_the_awaiting_handler(workers: Workers) -> None:
    job_id = enqueue(workers, "async_stopped", sleep=600)
    workers.start()
    wait_for(lambda: workers.noted("start"), timeout=30)
    workers.queue.cancel([job_id])
    wait_for(lambda: workers.queue.get(job_id).status is JobStatus.CANCELLED, timeout=30)
    # ctx.stopped() completed with the reason, and should_stop is true in the cancelled task
    assert [line[4:] for line in workers.noted("stopped")] == [["cancel", "True"]]


def test_sigterm_lets_short_ones_finish_and_releases_the_rest_unspent(workers: Workers) -> None:
    short = {enqueue(workers, sleep=1.0) for _ in range(150)}
    long = {enqueue(workers, sleep=600) for _ in range(50)}
    proc = workers.start("--async-concurrency", "300", "--shutdown-timeout", "3")
    wait_for(lambda: len(workers.noted("start")) == 200, timeout=60)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0, workers.output()
    for job_id in short:
        assert workers.queue.get(job_id).status is JobStatus.COMPLETED
    for job_id in long:
        job = workers.queue.get(job_id)
        assert (job.status, job.attempts, job.errors) == (JobStatus.PENDING, 0, []), job
    cancelled = workers.noted("cancelled")
    assert {line[1] for line in cancelled} == long
    assert {tuple(line[4:]) for line in cancelled} == {("shutdown", "True")}
    assert "released 50" in workers.output()


def test_a_bad_async_concurrency_is_refused_saying_so(sqlite_workers: Workers) -> None:
    with pytest.raises(JobcoreError, match="async_concurrency must be at least 1, got 0"):
        Worker(sqlite_workers.queue, async_concurrency=0)
    with pytest.raises(ConfigError, match="async_concurrency"):
        Config(env={"JOBCORE_ASYNC_CONCURRENCY": "0"})
