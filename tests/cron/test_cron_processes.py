"""Three real `jobcore run` worker processes, each with its scheduler, on one store (SQLite
file, PostgreSQL schema): every scheduled second is enqueued exactly once."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from testenv import subprocess_env, wait_for

from jobcore.testing import make_queue

JOBCORE = [sys.executable, "-m", "jobcore"]
SCHEDULES = {"tick": {"type": "noop", "every": "1s", "payload": {}}}


def test_three_schedulers_enqueue_each_scheduled_time_once(
    store_db: Path | str, tmp_path: Path
) -> None:
    postgres = ",jobcore_postgres" if isinstance(store_db, str) else ""
    env = subprocess_env(
        JOBCORE_LOAD_PLUGINS="",  # no installed plugin: quicker starts
        JOBCORE_PLUGINS=f"jobcore_test_plugin,jobcore_cron{postgres}",
        JOBCORE_CRON_SCHEDULES=json.dumps(SCHEDULES),
    )
    logs = [tmp_path / f"worker{n}.log" for n in range(3)]
    workers = []
    for log in logs:
        with log.open("w") as stderr:
            workers.append(
                subprocess.Popen(
                    [*JOBCORE, "--db", str(store_db), "run", "--concurrency", "1"],
                    stdout=subprocess.DEVNULL,
                    stderr=stderr,
                    env=env,
                )
            )
    try:
        wait_for(lambda: all("schedules running" in log.read_text() for log in logs), 60)
        time.sleep(3.5)  # three or four scheduled seconds with all three racing for each
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        codes = [worker.wait(60) for worker in workers]
    assert codes == [0, 0, 0], [log.read_text()[-2000:] for log in logs]
    modules = ["jobcore_cron", *(["jobcore_postgres"] if isinstance(store_db, str) else [])]
    queue = make_queue(store_db, modules=modules)
    try:
        jobs = queue.list_jobs(limit=1000)
    finally:
        queue.close()
    times = Counter(job.meta["cron"]["scheduled_at"] for job in jobs)
    assert len(times) >= 3
    assert max(times.values()) == 1, times
    seconds = sorted(int(at[17:19]) + 60 * int(at[14:16]) for at in times)
    assert seconds == list(range(seconds[0], seconds[0] + len(seconds)))  # none missing
    enqueued_by = [log.read_text().count("schedule tick: enqueued job") for log in logs]
    assert sum(enqueued_by) == len(jobs)
