"""Crash accounting (DESIGN §6) with real workers on an SQLite file: a job that
kills its worker is charged one attempt per crash, whatever the timing."""

from __future__ import annotations

import time
from pathlib import Path

from testenv import subprocess_env
from worker_crashes import LEASE, crash_until_failed, run_cli, start_worker

from jobcore import Queue


def test_a_job_that_kills_its_worker_fails_after_max_attempts_crashes(tmp_path: Path) -> None:
    """Issue 17.3: two such jobs, six crashes: every crash is an attempt."""
    crash_until_failed(tmp_path, str(tmp_path / "jobs.db"))


def test_prefetched_jobs_of_a_killed_worker_cost_nothing_and_its_killer_is_charged(
    tmp_path: Path,
) -> None:
    """The worker dies in one handler while jobs it prefetched wait (claimed, not begun):
    the sweep charges the killer one attempt and gives the waiting ones back untouched."""
    db = str(tmp_path / "jobs.db")
    env = subprocess_env(JOBCORE_DB=db)
    with Queue(db) as queue:
        queue.enqueue_many("noop", [{}] * 30, priority=10)  # short: the worker prefetches
        killer = queue.enqueue(
            "shell", {"command": 'sleep 0.2; kill -9 "$WORKER_PID"'}, priority=5
        ).job.id
        waiting = [r.job.id for r in queue.enqueue_many("noop", [{}] * 40, priority=0)]
        proc = start_worker(env, tmp_path, tmp_path / "worker.log")
        assert proc.wait(60) == -9, (tmp_path / "worker.log").read_text()[-3000:]
        prefetched = [
            job for job in map(queue.get, waiting) if job is not None and job.status == "claimed"
        ]
        assert prefetched, "the worker died before it prefetched anything: nothing was tested"
        assert all(job.started_at is None for job in prefetched)
        time.sleep(LEASE + 0.2)  # its leases run out
        run_cli({**env, "JOBCORE_LEASE": f"{LEASE}s"}, tmp_path, "sweep")
        charged = queue.get(killer)
        assert charged is not None and charged.status == "pending", charged
        assert charged.attempts == 1 and [e["error"] for e in charged.errors] == ["lease expired"]
        assert charged.history[-1]["outcome"] == "reclaimed"
        for job in prefetched:
            again = queue.get(job.id)
            assert again is not None and again.status == "pending", again
            assert (again.attempts, again.errors) == (0, [])
            assert again.history[-1]["outcome"] == "released"
