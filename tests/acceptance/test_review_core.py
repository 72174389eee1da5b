"""Review of issue 8 through real `jobcore` processes: faults the earlier tests missed."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from testenv import subprocess_env

JOBCORE = [sys.executable, "-m", "jobcore"]

# Loaded into a worker process (imported with the plugins, before the worker starts):
# death (os._exit) right after the first commit that claimed jobs, before the worker
# hands them to its executors.
DIE_AFTER_CLAIM = """
import os
from jobcore.storage.sqlite import SQLiteStorage

real = SQLiteStorage.commit_batch

def commit_batch(self, *args, **kwargs):
    recorded, claimed = real(self, *args, **kwargs)
    if claimed:
        os._exit(9)
    return recorded, claimed

SQLiteStorage.commit_batch = commit_batch
"""


def _cli(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*JOBCORE, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )


def _jobs(env: dict[str, str], cwd: Path) -> list[dict[str, Any]]:
    listed = _cli(env, cwd, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    jobs: list[dict[str, Any]] = json.loads(listed.stdout)
    return jobs


def test_a_worker_killed_right_after_its_claim_commit_charges_no_attempt(tmp_path: Path) -> None:
    """Jobs claimed for idle executors were marked started in the claim itself, so a
    worker dying between that commit and its executors beginning them (the commit's
    fsync is the widest window) had them swept as `lease expired` with an attempt
    charged: at max_attempts=1 they ended `failed` without having run."""
    (tmp_path / "die_after_claim.py").write_text(DIE_AFTER_CLAIM)
    log = tmp_path / "ran.log"
    env = subprocess_env(JOBCORE_DB=str(tmp_path / "jobs.db"))
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    dying = {**env, "JOBCORE_PLUGINS": "jobcore_test_plugin,die_after_claim"}
    for _ in range(3):
        done = _cli(
            env, tmp_path, "enqueue", "record", json.dumps({"log": str(log)}), "--max-attempts", "1"
        )
        assert done.returncode == 0, done.stderr
    _cli(env, tmp_path, "sweep")  # the first worker's own sweep then has nothing to do
    died = _cli(dying, tmp_path, "run", "--lease", "1s")
    assert died.returncode == 9, died.stderr
    assert not log.exists(), "no handler began before the worker died"
    assert {job["status"] for job in _jobs(env, tmp_path)} == {"claimed"}
    time.sleep(1.2)  # past the lease
    swept = _cli({**env, "JOBCORE_LEASE": "1s"}, tmp_path, "sweep")
    assert swept.returncode == 0, swept.stderr
    for job in _jobs(env, tmp_path):
        assert (job["status"], job["attempts"], job["errors"]) == ("pending", 0, []), job
    drained = _cli(env, tmp_path, "run", "--until-empty")
    assert drained.returncode == 0, drained.stderr
    assert {job["status"] for job in _jobs(env, tmp_path)} == {"completed"}
    assert len(log.read_text().splitlines()) == 3
