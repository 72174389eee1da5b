"""Jobs that kill their own worker (`kill -9`), run by restarted `jobcore run` processes.

Shared by the SQLite and PostgreSQL crash-accounting tests: the store is the
only difference.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from testenv import subprocess_env

from jobcore import Queue

JOBCORE = [sys.executable, "-m", "jobcore"]
LEASE = 0.4  # seconds: the workers' lease, so a dead worker's jobs come back soon


def run_cli(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [*JOBCORE, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done


def start_worker(env: dict[str, str], cwd: Path, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    """`jobcore run --until-empty` (then `extra` options) whose pid every job it runs
    finds in `$WORKER_PID`.

    `exec` keeps the shell's pid, so `$$` is the worker's, however the shell plugin
    starts its commands (a wrapper process would change `$PPID`, not this).
    """
    run = [*JOBCORE, "run", "--until-empty", "--concurrency", "1", "--lease", f"{LEASE}s", *extra]
    with open(log, "ab") as out:
        return subprocess.Popen(
            ["/bin/sh", "-c", 'WORKER_PID=$$; export WORKER_PID; exec "$@"', "sh", *run],
            env=env,
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def crash_until_failed(tmp: Path, db: str, *, jobs: int = 2, max_attempts: int = 3) -> None:
    """`jobs` shell jobs that each `kill -9` the worker running them, run by rounds of
    restarted workers (one per job, each running one job at a time) and `jobcore sweep`
    until every job ended. Each must end `failed` after exactly `max_attempts` runs,
    each run a `lease expired` error, and no run given back as never started.
    """
    env = subprocess_env(JOBCORE_DB=db)
    runs = tmp / "runs.log"
    with Queue(db) as queue:
        ids = [
            queue.enqueue(
                "shell",
                {"command": f'echo job{n} >> "{runs}"; kill -9 "$WORKER_PID"'},
                max_attempts=max_attempts,
            ).job.id
            for n in range(jobs)
        ]
        log = tmp / "workers.log"
        for _round in range(3 * max_attempts):
            workers = [start_worker(env, tmp, log) for _ in range(jobs)]
            for proc in workers:
                assert proc.wait(60) in (0, -9), log.read_text()[-3000:]
            time.sleep(LEASE + 0.2)  # the dead workers' leases run out
            run_cli({**env, "JOBCORE_LEASE": f"{LEASE}s"}, tmp, "sweep")  # confirms in LEASE/4 + 1s
            shown = [queue.get(job_id) for job_id in ids]
            if all(job.status == "failed" for job in shown):
                break
    counted = runs.read_text().split()
    for n, job in enumerate(shown):
        assert job.status == "failed", job
        assert counted.count(f"job{n}") == max_attempts, (counted, job.history)
        assert job.attempts == max_attempts, job
        assert [e["error"] for e in job.errors] == ["lease expired"] * max_attempts, job
        outcomes = [entry["outcome"] for entry in job.history]
        assert outcomes == ["reclaimed"] * (max_attempts - 1) + ["failed"], job.history
