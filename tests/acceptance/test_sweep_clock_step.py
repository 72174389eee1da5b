"""`jobcore sweep` after a forward step of the store's clock (issue 17 item 27).

A one-shot sweep cannot see a step: a live worker's lease, not yet renewed since
the step, looks as expired as a dead worker's. Before, it re-queued both (the live
job then ran twice). Now it looks first, waits lease/4 + 1s, and reclaims only the
claims still unchanged: the live worker's keeper extended its lease meanwhile.
"""

from __future__ import annotations

import json
import signal
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
