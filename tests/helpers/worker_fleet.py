"""`jobcore run` worker processes on one store, each logging to a file, stopped by SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from testenv import subprocess_env

JOBCORE = [sys.executable, "-m", "jobcore"]


class Workers:
    """`count` processes of `jobcore --db DB run --concurrency 4 ARGS` with `env` set."""

    def __init__(
        self, db: Path | str, tmp: Path, count: int, *args: str, env: dict[str, str]
    ) -> None:
        self.logs = [(tmp / f"worker{n}.log").open("w") for n in range(count)]
        self.procs = [
            subprocess.Popen(
                [*JOBCORE, "--db", str(db), "run", "--concurrency", "4", *args],
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=subprocess_env(**env),
            )
            for log in self.logs
        ]

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for log in self.logs:
            log.close()
