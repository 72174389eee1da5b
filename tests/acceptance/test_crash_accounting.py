"""Crash accounting (DESIGN §6) with real workers on an SQLite file: a job that
kills its worker is charged one attempt per crash, whatever the timing."""

from __future__ import annotations

from pathlib import Path

from worker_crashes import crash_until_failed


def test_a_job_that_kills_its_worker_fails_after_max_attempts_crashes(tmp_path: Path) -> None:
    """Issue 17.3: two such jobs, six crashes: every crash is an attempt."""
    crash_until_failed(tmp_path, str(tmp_path / "jobs.db"))
