"""A forward step of the store's clock longer than the lease must not re-run running jobs.

Leases expire by the store's clock. Before, after a step forward every worker's
sweep saw every live lease as expired and re-queued running jobs (double runs).
Now each worker's keeper notices the store clock outrunning elapsed time,
extends its own leases first and sweeps again only one lease period later.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import jobcore_test_plugin as tp
import pytest
from testenv import wait_for

from jobcore import JobStatus, Queue, Worker
from jobcore.clockjump import ClockJumps, SweepGuard
from jobcore.plugins import make_plugin_manager
from jobcore.storage.sqlite import SQLiteStorage
from jobcore.testing.helpers import make_config
from jobcore.timeutil import now_ms


class SteppingClock:
    """This machine's clock plus an offset a test can step."""

    def __init__(self) -> None:
        self.offset_ms = 0

    def __call__(self) -> int:
        return now_ms() + self.offset_ms


def queue_on(db: str, clock: SteppingClock) -> Queue:
    pm = make_plugin_manager(plugins=[("jobcore_test_plugin", tp)], only=())
    return Queue(db, config=make_config(), pm=pm, storage=SQLiteStorage(db, clock=clock))


def test_a_clock_step_longer_than_the_lease_does_not_rerun_running_jobs(
    jobcore_db: str, tmp_path: Path
) -> None:
    clock = SteppingClock()
    queues = [queue_on(jobcore_db, clock) for _ in range(2)]
    log = tmp_path / "spans"
    job = queues[0].enqueue("span", {"log": str(log), "seconds": 2.5}).job
    workers = [Worker(queue, lease=1.0, poll_interval=0.05) for queue in queues]
    threads = [threading.Thread(target=w.run, daemon=True) for w in workers]
    try:
        for thread in threads:
            thread.start()
        wait_for(lambda: log.exists() and "start" in log.read_text())
        time.sleep(0.3)  # the keepers have a baseline
        clock.offset_ms += 10_000  # ten lease periods at once
        wait_for(lambda: queues[0].get(job.id).status is JobStatus.COMPLETED, timeout=15)
        runs = [line for line in log.read_text().splitlines() if line.startswith("start")]
        done = queues[0].get(job.id)
    finally:
        for worker in workers:
            worker.stop(graceful=False)
        for thread in threads:
            thread.join(10)
        for queue in queues:
            queue.close()
    assert len(runs) == 1, runs
    assert done.attempts == 1 and done.errors == []


def test_clock_jumps_are_store_advance_beyond_elapsed_time() -> None:
    wall = [1_000_000]
    mono = [50.0]
    jumps = ClockJumps(lambda: wall[0], tolerance_ms=250, monotonic=lambda: mono[0])
    assert jumps.check() == 0  # no baseline yet
    wall[0] += 5000
    mono[0] += 5.0
    assert jumps.check() == 0  # both advanced alike (a slow, loaded machine)
    wall[0] += 200
    assert jumps.check() == 0  # within tolerance
    wall[0] += 10_000
    mono[0] += 1.0
    assert jumps.check() == 9000
    wall[0] -= 60_000
    assert jumps.check() == 0  # a step back only lengthens leases


def test_sweep_guard_holds_sweeps_one_lease_after_a_step(caplog: pytest.LogCaptureFixture) -> None:
    """The rule every periodic sweeper follows (a worker's keeper, the hub)."""
    wall, mono = [1_000_000], [50.0]
    guard = SweepGuard(lambda: wall[0], lease_s=4.0, monotonic=lambda: mono[0])
    assert guard.check() == 0 and guard.may_sweep()  # the first reading
    wall[0] += 900  # within lease/4
    assert guard.check() == 0 and guard.may_sweep()
    wall[0] += 40_000
    mono[0] += 1.0
    with caplog.at_level(logging.WARNING, logger="jobcore"):
        assert guard.check() == 39_000  # the step, less the elapsed second
    assert "the store's clock stepped 39.0s ahead of elapsed time" in caplog.text
    mono[0] += 3.9
    wall[0] += 3900
    assert guard.check() == 0 and not guard.may_sweep()  # still within one lease
    mono[0] += 0.1
    assert guard.may_sweep()
