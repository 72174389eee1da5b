"""`jobcore sweep` after a forward step of the store's clock (issue 17 item 27).

A one-shot sweep cannot see a step: a live worker's lease, not yet renewed since
the step, looks as expired as a dead worker's. Before, it re-queued both (the live
job then ran twice). Now it looks first, waits lease/4 + 1s, and reclaims only the
claims still unchanged: the live worker's keeper extended its lease meanwhile.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from shifted_clock import step
from testenv import subprocess_env, wait_for

JOBCORE = [sys.executable, "-m", "jobcore"]
LEASE = "4s"  # the workers' and the sweep's lease: the sweep confirms over 2s


def _cli(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [*JOBCORE, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done


def _job(env: dict[str, str], cwd: Path, job_id: str) -> dict[str, Any]:
    shown: dict[str, Any] = json.loads(_cli(env, cwd, "show", job_id, "--json").stdout)
    return shown


def _worker(env: dict[str, str], cwd: Path, queue: str) -> subprocess.Popen[bytes]:
    with open(cwd / f"worker-{queue}.log", "wb") as log:
        return subprocess.Popen(
            [*JOBCORE, "run", "--queue", queue, "--concurrency", "1", "--lease", LEASE],
            env=env,
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def _running(env: dict[str, str], cwd: Path, queue: str) -> tuple[str, Path]:
    started = cwd / f"started-{queue}"
    payload = {"seconds": 60, "cooperative": True, "started": str(started)}
    job_id = _cli(env, cwd, "enqueue", "sleepy", json.dumps(payload), "--queue", queue)
    return job_id.stdout.strip(), started


def test_sweep_after_a_clock_step_spares_a_live_worker_and_reclaims_a_dead_ones(
    tmp_path: Path,
) -> None:
    offset = tmp_path / "clock-offset"
    env = subprocess_env(
        JOBCORE_DB=str(tmp_path / "jobs.db"),
        JOBCORE_PLUGINS="jobcore_test_plugin,shifted_clock",
        JOBCORE_TEST_CLOCK_OFFSET=str(offset),
        JOBCORE_LEASE=LEASE,
    )
    live_id, live_started = _running(env, tmp_path, "live")
    dead_id, dead_started = _running(env, tmp_path, "dead")
    live, dead = _worker(env, tmp_path, "live"), _worker(env, tmp_path, "dead")
    try:
        wait_for(lambda: live_started.exists() and dead_started.exists(), timeout=30)
        lease_id = _job(env, tmp_path, live_id)["lease_id"]
        dead.send_signal(signal.SIGKILL)
        assert dead.wait(10) == -signal.SIGKILL
        # Between two heartbeats of the live worker (held so that the step comes
        # before its next one), the store's clock steps ten leases ahead.
        live.send_signal(signal.SIGSTOP)
        try:
            step(offset, 40_000)
            sweep = subprocess.Popen(
                [*JOBCORE, "sweep", "--json"],
                env=env,
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            time.sleep(1.5)  # the sweep's first look sees both leases expired
        finally:
            live.send_signal(signal.SIGCONT)
        out, err = sweep.communicate(timeout=60)
        assert sweep.returncode == 0, err
        swept = json.loads(out)
        assert [(item["action"], item["job"]["id"]) for item in swept] == [("reclaimed", dead_id)]
        assert "swept 1 job(s)" not in out
        kept = _job(env, tmp_path, live_id)
        assert (kept["status"], kept["lease_id"], kept["errors"]) == ("claimed", lease_id, [])
        reclaimed = _job(env, tmp_path, dead_id)
        assert reclaimed["status"] in ("pending", "claimed")  # the live worker takes no "dead" job
        assert [e["error"] for e in reclaimed["errors"]] == ["lease expired"]
        assert live.poll() is None
    finally:
        for proc in (live, dead):
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)


def _state(db: Path, job_id: str) -> tuple[str, str | None]:
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        status, lease_id = conn.execute(
            "SELECT status, lease_id FROM jobs WHERE id = ?", (job_id,)
        ).fetchone()
    return status, lease_id


def test_a_worker_started_right_after_a_clock_step_spares_a_live_workers_job(
    tmp_path: Path,
) -> None:
    """A worker's keeper takes its first reading of the store's clock when it starts: a
    step just before goes unseen. Before, it swept at once and re-queued the live job of
    a worker that had not heartbeat since the step (it then ran twice). Now its first
    sweep looks, and reclaims after lease/4 + 1s only the leases still unchanged."""
    offset, db = tmp_path / "clock-offset", tmp_path / "jobs.db"
    env = subprocess_env(
        JOBCORE_DB=str(db),
        JOBCORE_PLUGINS="jobcore_test_plugin,shifted_clock",
        JOBCORE_TEST_CLOCK_OFFSET=str(offset),
        JOBCORE_LEASE=LEASE,
    )
    live_id, live_started = _running(env, tmp_path, "live")
    dead_id, dead_started = _running(env, tmp_path, "dead")
    live, dead = _worker(env, tmp_path, "live"), _worker(env, tmp_path, "dead")
    late: subprocess.Popen[bytes] | None = None
    try:
        wait_for(lambda: live_started.exists() and dead_started.exists(), timeout=30)
        lease_id = _job(env, tmp_path, live_id)["lease_id"]
        dead.send_signal(signal.SIGKILL)
        assert dead.wait(10) == -signal.SIGKILL
        live.send_signal(signal.SIGSTOP)  # its next heartbeat comes after the step
        try:
            step(offset, 40_000)
            late = _worker(env, tmp_path, "late")  # claims nothing: only its keeper sweeps
            looked = tmp_path / "worker-late.log"
            wait_for(
                lambda: (
                    "look expired" in looked.read_text()
                    or _state(db, live_id) != ("claimed", lease_id)
                ),
                timeout=30,
            )
        finally:
            live.send_signal(signal.SIGCONT)
        # the dead worker's job is reclaimed at the confirmation, lease/4 + 1s on
        wait_for(lambda: _state(db, dead_id)[0] != "claimed", timeout=15)
        kept = _job(env, tmp_path, live_id)
        assert (kept["status"], kept["lease_id"], kept["errors"]) == ("claimed", lease_id, [])
        reclaimed = _job(env, tmp_path, dead_id)
        assert reclaimed["status"] == "pending"
        assert [e["error"] for e in reclaimed["errors"]] == ["lease expired"]
        assert live.poll() is None and late.poll() is None
    finally:
        for proc in (live, dead, late):
            if proc is not None and proc.poll() is None:
                proc.kill()
            if proc is not None:
                proc.wait(10)
