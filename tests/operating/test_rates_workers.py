"""Rate limits with real worker processes on SQLite and PostgreSQL (DESIGN §16): measured
from the jobs' `claimed_at`, no sliding window holds more than the rate while throughput
reaches it (also over a minute of work); an idle worker wakes when the window opens, not
at its poll; a handler's `RetryAfter(s, limit=True)` holds the whole limit back."""

from __future__ import annotations

import time
from pathlib import Path

import worker_fleet
from hubproc import jobcore
from testenv import subprocess_env, wait_for

from jobcore.queue import Queue

ENV = {"JOBCORE_PLUGINS": "jobcore_rates_plugin", "JOBCORE_PREFETCH": "4"}


def _cli(db: Path | str, *args: str) -> str:
    return jobcore(db, *args, env=subprocess_env(**ENV)).stdout


PLUGIN = "jobcore_rates_plugin"  # the `queue` fixture's job types (tests/operating/conftest.py)


class Workers(worker_fleet.Workers):
    def __init__(self, db: Path | str, tmp: Path, count: int, *args: str) -> None:
        super().__init__(db, tmp, count, *args, env=ENV)


def _done(queue: Queue, total: int) -> bool:
    return queue.storage.count_by_status().get("completed", 0) >= total


def _claim_times(queue: Queue, **filters: object) -> list[int]:
    jobs = queue.storage.list_jobs(statuses=["completed"], limit=10_000, **filters)  # type: ignore[arg-type]
    return sorted(job.claimed_at for job in jobs if job.claimed_at is not None)


def _most_in_a_window(times: list[int], period_ms: int) -> int:
    """The most claims any window [t, t + period) holds (each starting at a claim)."""
    most, end = 0, 0
    for start, at in enumerate(times):
        end = max(end, start)
        while end < len(times) and times[end] < at + period_ms:
            end += 1
        most = max(most, end - start)
    return most


def test_a_rate_holds_across_three_worker_processes_over_many_windows(
    store_db: Path | str, tmp_path: Path, queue: Queue
) -> None:
    rate, period_ms, total = 8, 500, 64  # about 4 s of work at the rate: 8 windows
    _cli(store_db, "limit", "metered", "--rate", f"{rate}/{period_ms}ms")
    queue.enqueue_many("unrated", [{}] * total, queue="metered")
    queue.enqueue_many("unrated", [{}] * 40)  # another queue's work goes on beside it
    workers = Workers(store_db, tmp_path, 3)
    try:
        wait_for(lambda: _done(queue, total + 40), timeout=120)
    finally:
        workers.stop()
    times = _claim_times(queue, queues=["metered"])
    assert len(times) == total
    assert _most_in_a_window(times, period_ms) <= rate  # exact over a sliding window
    # throughput reaches the rate (a sanity bound, not a speed test): the claims span
    # about (total / rate - 1) periods; allow half again for a loaded machine
    span = times[-1] - times[0]
    assert span >= (total // rate - 1) * period_ms
    assert span <= 1.5 * (total / rate) * period_ms + 2000
    others = _claim_times(queue, queues=["default"])
    assert others[-1] - others[0] < span  # the other queue was not held to the rate


def test_an_idle_worker_wakes_when_the_window_opens_not_at_its_poll(
    store_db: Path | str, tmp_path: Path, queue: Queue
) -> None:
    _cli(store_db, "limit", "slow", "--rate", "2/2s")
    workers = Workers(store_db, tmp_path, 1, "--poll-interval", "60s")
    try:
        time.sleep(1.0)  # the worker is up and idle
        queue.enqueue_many("unrated", [{}] * 3, queue="slow")
        wait_for(lambda: _done(queue, 3), timeout=30)  # not the 60 s poll
    finally:
        workers.stop()
    times = _claim_times(queue, queues=["slow"])
    assert times[2] - times[0] >= 2000  # the third waited for the window
    assert times[2] - times[0] < 10_000  # and started once it opened, not at a poll


def test_retry_after_with_limit_holds_the_whole_limit_back(
    store_db: Path | str, tmp_path: Path, queue: Queue
) -> None:
    queue.enqueue("pushy", {"push": 3.0})
    workers = Workers(store_db, tmp_path, 1)
    try:
        wait_for(lambda: queue.storage.count_by_status().get("scheduled", 0) == 1, timeout=30)
        pushed_at = queue.storage.now()
        queue.enqueue_many("pushy", [{}] * 3)
        queue.enqueue("unrated", {})
        wait_for(lambda: _done(queue, 5), timeout=30)
    finally:
        workers.stop()
    others = queue.storage.list_jobs(types=["pushy"], statuses=["completed"], limit=10)
    later = [job.claimed_at for job in others if job.attempts == 1]
    assert len(later) == 3
    assert all(at is not None and at >= pushed_at + 2500 for at in later)
    free = queue.storage.list_jobs(types=["unrated"], limit=1)[0]
    assert free.claimed_at is not None and free.claimed_at < pushed_at + 2500


def test_a_rate_measured_over_a_minute_of_work(
    store_db: Path | str, tmp_path: Path, queue: Queue
) -> None:
    # issue 21: 10 starts per 5 s, 130 jobs: a minute of work at the rate (and some over),
    # three worker processes; no 5 s window ever holds more than 10 claims, and the
    # minute's throughput is the rate's, not a fraction of it
    rate, period_ms, total = 10, 5_000, 130
    _cli(store_db, "limit", "metered", "--rate", f"{rate}/5s")
    queue.enqueue_many("unrated", [{}] * total, queue="metered")
    workers = Workers(store_db, tmp_path, 3)
    try:
        wait_for(lambda: _done(queue, total), timeout=180)
    finally:
        workers.stop()
    times = _claim_times(queue, queues=["metered"])
    assert len(times) == total
    assert _most_in_a_window(times, period_ms) <= rate
    first_minute = [at for at in times if at < times[0] + 60_000]
    # 12 windows fit a minute: 120 starts at the rate; a claim that waits out its window
    # may land a little late on a loaded machine, so allow one window's worth less
    assert rate * 11 <= len(first_minute) <= rate * 12
