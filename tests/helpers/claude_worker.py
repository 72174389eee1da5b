"""A real `jobcore` worker set-up for the claude plugin: files root, cwd and TMPDIR of its own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from anthropic_stub import StubServer
from testenv import subprocess_env

from jobcore import Queue
from jobcore.testing import make_queue

JOBCORE = [sys.executable, "-m", "jobcore"]


class ClaudeWorker:
    """Runs `jobcore` commands and workers on one database, against the Anthropic stub."""

    def __init__(self, tmp_path: Path, stub: StubServer, **env: str) -> None:
        self.tmp = tmp_path
        self.root = tmp_path / "files"  # the files root
        self.cwd = tmp_path / "cwd"  # the worker's working directory
        self.tmpdir = tmp_path / "tmp"  # the worker's TMPDIR
        for folder in (self.root, self.cwd, self.tmpdir):
            folder.mkdir()
        self.env = subprocess_env(
            JOBCORE_DB=str(tmp_path / "jobs.db"),
            JOBCORE_FILES_ROOT=str(self.root),
            JOBCORE_CLAUDE_BASE_URL=stub.base_url,
            JOBCORE_CLAUDE_MODEL="claude-test-model",
            JOBCORE_BACKOFF_BASE="0",
            ANTHROPIC_API_KEY="sk-test-dummy",
            CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
            TMPDIR=str(self.tmpdir),
            **env,
        )
        self.workers: list[subprocess.Popen[bytes]] = []
        self._reader: Queue | None = None

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*JOBCORE, *args],
            env=self.env,
            cwd=self.cwd,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def enqueue(self, job_type: str, payload: dict[str, Any], *options: str) -> str:
        """Enqueue through `enqueue @file` (a payload may be larger than one argv string)."""
        source = self.tmp / "payload.json"
        source.write_text(json.dumps(payload))
        done = self.cli("enqueue", job_type, f"@{source}", *options)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def run_until_empty(self) -> None:
        done = self.cli("run", "--until-empty")
        assert done.returncode == 0, done.stderr

    def worker(self, *options: str) -> subprocess.Popen[bytes]:
        with open(self.tmp / f"worker{len(self.workers)}.log", "wb") as log:
            proc = subprocess.Popen(
                [*JOBCORE, "run", *options],
                env=self.env,
                cwd=self.cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.workers.append(proc)
        return proc

    def log(self) -> str:
        return "".join(p.read_text() for p in sorted(self.tmp.glob("worker*.log")))

    def queue(self) -> Queue:
        """The database opened in this process (reads and cancels without a `jobcore` start)."""
        if self._reader is None:
            self._reader = make_queue(self.tmp / "jobs.db")
        return self._reader

    def job(self, job_id: str) -> dict[str, Any]:
        """The job as `show --json` has it, read in this process (polling stays cheap)."""
        return self.queue().get(job_id).to_json()

    def stop_all(self) -> None:
        if self._reader is not None:
            self._reader.close()
        for proc in self.workers:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
