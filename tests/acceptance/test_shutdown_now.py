"""Issue 17.26: a second SIGTERM/SIGINT means now, `stop_grace` included."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from testenv import subprocess_env, wait_for

from jobcore.storage.sqlite import SQLiteStorage

JOBCORE = [sys.executable, "-m", "jobcore"]


@pytest.mark.parametrize("second", [signal.SIGTERM, signal.SIGINT])
def test_a_second_signal_releases_a_handler_that_ignores_stop_at_once(
    tmp_path: Path, second: signal.Signals
) -> None:
    db = tmp_path / "jobs.db"
    env = subprocess_env(JOBCORE_DB=str(db), JOBCORE_STOP_GRACE="60s")
    marker = tmp_path / "started"
    payload = json.dumps({"seconds": 120, "started": str(marker)})  # never looks at should_stop
    enqueued = subprocess.run(
        [*JOBCORE, "enqueue", "sleepy", payload], env=env, capture_output=True, text=True
    )
    assert enqueued.returncode == 0, enqueued.stderr
    job_id = enqueued.stdout.strip()
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            [*JOBCORE, "run", "--shutdown-timeout", "60s"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(marker.exists, timeout=60)
        worker.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert worker.poll() is None  # the first signal waits for the job
        asked = time.monotonic()
        worker.send_signal(second)
        assert worker.wait(30) == 0, log.read_text()
        assert time.monotonic() - asked < 10, log.read_text()  # not the 60s stop_grace
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    storage = SQLiteStorage(str(db))
    job = storage.get(job_id)
    storage.close()
    assert job is not None and job.status == "pending" and job.attempts == 0
    assert job.locked_by is None and job.history[-1]["outcome"] == "released"
