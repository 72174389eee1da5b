"""The browser tests' harness: a real `jobcore serve` process and sign-in.

Fixtures are in conftest.py.

Without Chromium (`apt-get install chromium`) or the `playwright` package the
tests skip, saying so; with CI=true a missing browser fails instead. Screenshots
go to tests/browser/output/ (ignored by git); the path is printed.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM = os.environ.get("JOBCORE_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
OUTPUT = Path(__file__).parent / "output"
JOBCORE = [sys.executable, "-m", "jobcore"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Hub:
    """A `jobcore serve` process on one SQLite file, restartable on the same port."""

    folder: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    tokens: dict[str, str] = field(default_factory=dict)

    @property
    def db(self) -> str:
        """The store: a SQLite file in the test's folder, or, when `JOBCORE_TEST_DASHBOARD_DB`
        names a PostgreSQL database, a schema of its own there."""
        base = os.environ.get("JOBCORE_TEST_DASHBOARD_DB")
        if base:
            return f"{base}?schema=dash_{self.port}_{os.getpid()}"
        return str(self.folder / "jobs.db")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            JOBCORE_DB=self.db,
            XDG_STATE_HOME=str(self.folder / "state"),
            JOBCORE_LOG_FORMAT="text",
        )
        env.pop("JOBCORE_HTTP_SESSION_SECRET", None)
        return env

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run `jobcore ARGS` in another process on the hub's database."""
        done = subprocess.run(
            [*JOBCORE, *args], env=self.env, capture_output=True, text=True, timeout=120
        )
        if check and done.returncode != 0:
            raise AssertionError(f"jobcore {' '.join(args)} failed: {done.stderr}")
        return done

    def token(self, name: str, scope: str) -> str:
        if name not in self.tokens:
            out = self.cli("tokens", "create", "--name", name, "--scope", scope).stdout
            self.tokens[name] = out.strip().splitlines()[-1]
        return self.tokens[name]

    def start(self) -> None:
        with open(self.folder / "serve.log", "ab") as log:
            self.process = subprocess.Popen(
                [
                    *JOBCORE,
                    "serve",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                ],
                env=self.env,
                stdout=log,
                stderr=log,
            )
        try:
            self._wait_up(self.process)
        except BaseException:
            self.stop()  # a hub that never came up is not left running
            raise

    def _wait_up(self, process: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise AssertionError(
                    f"jobcore serve exited {process.returncode}: "
                    + (self.folder / "serve.log").read_text()[-2000:]
                )
            try:
                with urllib.request.urlopen(f"{self.url}/api/health", timeout=1) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
        self.process.kill()  # never leave it running
        self.process.wait()
        raise AssertionError("jobcore serve did not answer /api/health within 30 s")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        except BaseException:  # interrupted (a test timeout): never leave it running
            process.kill()
            process.wait()
            raise


def sign_in(page: Any, hub: Hub, token: str, path: str = "/") -> None:
    page.goto(f"{hub.url}{path}")
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{hub.url}{path}")
