"""The keeper backs off on a database error that persists (DESIGN §6).

Before, a heartbeat already due when the database failed stayed due: the keeper retried
at once, for ever (a worker on a full disk logged 100k error lines in 8s and spent a
CPU on them). Here the disk of a running worker fails (a real SQLITE_IOERR through
SQLite's file layer, `faulty_disk`) and recovers.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from testenv import subprocess_env, wait_for

KEEPER_ERROR = "database error extending leases or sweeping"


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks


def test_the_keeper_backs_off_while_the_disk_fails(tmp_path: Path) -> None:
    failing = tmp_path / "disk-fails"
    started = tmp_path / "started"
    env = subprocess_env(
        JOBCORE_DB=str(tmp_path / "jobs.db"),
        JOBCORE_PLUGINS="jobcore_test_plugin,faulty_disk",
        FAULTY_DISK_WHILE=str(failing),
    )
    payload = {"seconds": 60, "cooperative": True, "started": str(started)}
    subprocess.run(
        [sys.executable, "-m", "jobcore", "enqueue", "sleepy", json.dumps(payload)],
        env=env,
        check=True,
        capture_output=True,
        timeout=60,
    )
    log_path = tmp_path / "worker.log"
    with open(log_path, "wb") as log:
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jobcore",
                "run",
                "--lease",
                "2s",
                "--concurrency",
                "1",
                "--shutdown-timeout",
                "1s",
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(started.exists, timeout=30)
        cpu = _cpu_seconds(worker.pid)
        failing.touch()  # every write fails from now on: heartbeats (every 0.5s), sweeps
        wait_for(lambda: KEEPER_ERROR in log_path.read_text(), timeout=30)
        time.sleep(3)
        cpu = _cpu_seconds(worker.pid) - cpu
        errors = log_path.read_text().count(KEEPER_ERROR)
        failing.unlink()
        # 0.05s doubling to lease/4 (0.5s): about 10 tries in 3s; before, thousands
        assert 2 <= errors <= 25, errors
        assert cpu < 1.0, cpu
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
