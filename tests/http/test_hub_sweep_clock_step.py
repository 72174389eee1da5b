"""The hub's own sweep after a forward step of the store's clock (issue 17 item 27).

The hub sweeps expired leases every lease/2. Before, a step of the store's clock made a
live worker's lease look expired and the hub re-queued its job (it then ran twice). Now
the hub's sweep follows the keeper's rule: after a step, no sweep for one lease of real
elapsed time, by when every live worker has extended its leases.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from hubproc import Hub, jobcore
from shifted_clock import step
from testenv import subprocess_env, wait_for

JOBCORE = [sys.executable, "-m", "jobcore"]


def test_a_clock_step_does_not_make_the_hub_reclaim_a_live_workers_job(tmp_path: Path) -> None:
    db, offset, started = tmp_path / "jobs.db", tmp_path / "clock-offset", tmp_path / "started"
    env = subprocess_env(
        JOBCORE_PLUGINS="jobcore_test_plugin,shifted_clock",
        JOBCORE_TEST_CLOCK_OFFSET=str(offset),
    )
    payload = {"seconds": 60, "cooperative": True, "started": str(started)}
    job_id = jobcore(db, "enqueue", "sleepy", json.dumps(payload), env=env).stdout.strip()
    hub = Hub(db, "--lease", "4s", env=env)  # sweeps every 2s
    with open(tmp_path / "worker.log", "wb") as log:
        worker = subprocess.Popen(
            [*JOBCORE, "--db", str(db), "run", "--concurrency", "1", "--lease", "4s"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: started.exists(), timeout=30)
        # The step comes between two heartbeats of the live worker (held for 3/4 of
        # a lease): the hub's sweep runs more than once meanwhile.
        worker.send_signal(signal.SIGSTOP)
        try:
            step(offset, 40_000)  # ten leases ahead
            time.sleep(3.0)
        finally:
            worker.send_signal(signal.SIGCONT)
        time.sleep(3.0)  # past the hub's hold: its sweeps find the lease extended
        shown = json.loads(jobcore(db, "show", job_id, "--json", env=env).stdout)
        assert (shown["status"], shown["attempts"], shown["errors"]) == ("claimed", 1, [])
        assert started.read_text().split()[1] == "1"  # it never began again
        assert "the store's clock stepped" in hub.output()
    finally:
        worker.kill()
        worker.wait(10)
        hub.terminate()
