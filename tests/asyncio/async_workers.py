"""`jobcore run` processes with the async test plugin on one store (tests/asyncio)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from testenv import subprocess_env

from jobcore import Queue
from jobcore.testing import make_queue

JOBCORE = [sys.executable, "-m", "jobcore"]
PLUGINS = "jobcore_test_plugin,jobcore_async_plugin"


class Workers:
    """`jobcore run` processes with the async test plugin on one store, and a Queue on it."""

    def __init__(self, tmp_path: Path, url: str) -> None:
        self.tmp = tmp_path
        self.url = url
        self.log = str(tmp_path / "notes.log")
        self.env = subprocess_env(JOBCORE_DB=url, JOBCORE_PLUGINS=PLUGINS)
        self.procs: list[subprocess.Popen[bytes]] = []
        plugins = []
        if url.startswith("postgresql"):
            import jobcore_postgres

            plugins.append(jobcore_postgres)
        self.queue: Queue = make_queue(url, *plugins, modules=["jobcore_async_plugin"])
        self.queue.storage.migrate()

    def start(self, *options: str, **env: str) -> subprocess.Popen[bytes]:
        with open(self.tmp / f"worker{len(self.procs)}.log", "wb") as out:
            proc = subprocess.Popen(
                [*JOBCORE, "run", *options],
                env={**self.env, **env},
                cwd=self.tmp,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.procs.append(proc)
        return proc

    def output(self, index: int = -1) -> str:
        return (self.tmp / f"worker{index % len(self.procs)}.log").read_text(errors="replace")

    def notes(self) -> list[list[str]]:
        path = Path(self.log)
        if not path.exists():
            return []
        return [line.split() for line in path.read_text().splitlines()]

    def noted(self, event: str) -> list[list[str]]:
        return [line for line in self.notes() if line[0] == event]

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
        self.queue.close()
