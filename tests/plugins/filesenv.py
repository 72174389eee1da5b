"""The `jobcore` command line in a folder of its own, for the files plugin's process tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from testenv import subprocess_env

JOBCORE = [sys.executable, "-m", "jobcore"]


class Cli:
    """Runs `jobcore …` with `cwd` as the working directory and `env` over a clean environment."""

    def __init__(self, cwd: Path, *global_options: str, **env: str) -> None:
        self.cwd = cwd
        self.global_options = list(global_options)  # e.g. --config FILE, before the command
        self.umask = -1  # the subprocesses' umask; -1 keeps this process's
        self.env = subprocess_env(JOBCORE_LOAD_PLUGINS="files", **env)

    def __call__(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*JOBCORE, *self.global_options, *args],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            umask=self.umask,
        )

    def enqueue(self, job_type: str, payload: dict[str, Any], *options: str) -> str:
        done = self("enqueue", job_type, json.dumps(payload), *options)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def enqueue_many(self, job_type: str, payloads: list[dict[str, Any]], *options: str) -> None:
        """One `enqueue --from` for all of them (one process, one transaction)."""
        lines = self.cwd / f".{job_type}-{len(payloads)}.jsonl"
        lines.write_text("".join(json.dumps(payload) + "\n" for payload in payloads))
        done = self("enqueue", job_type, "--from", str(lines), *options)
        lines.unlink()
        assert done.returncode == 0, done.stderr

    def reconcile(self) -> tuple[int, list[str]]:
        """`jobcore reconcile`: its exit code and the lines it printed."""
        done = self("reconcile", timeout=30)
        assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr
        return done.returncode, done.stdout.splitlines()

    def jobs(self) -> dict[str, dict[str, Any]]:
        """Every job by id, from one `list --json`."""
        done = self("list", "--json", "--limit", "100000")
        assert done.returncode == 0, done.stderr
        return {job["id"]: job for job in json.loads(done.stdout)}

    def drain(self, *options: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """A real worker process until nothing is left to do."""
        done = self("run", "--until-empty", "--backoff-base", "0s", *options, timeout=timeout)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr, done.stderr
        return done

    def show(self, job_id: str) -> dict[str, Any]:
        done = self("show", job_id, "--json")
        assert done.returncode == 0, done.stderr
        job: dict[str, Any] = json.loads(done.stdout)
        return job
