"""A real `jobcore serve` subprocess on 127.0.0.1 and a free port, for the hub's tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

import httpx
from testenv import subprocess_env

JOBCORE = [sys.executable, "-m", "jobcore"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def jobcore(
    db: Path, *args: str, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run one `jobcore --db DB …` command to completion."""
    done = subprocess.run(
        [*JOBCORE, "--db", str(db), *args],
        capture_output=True,
        text=True,
        env=env or subprocess_env(),
        timeout=60,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"jobcore {' '.join(args)} exited {done.returncode}: {done.stderr}")
    return done


class Hub:
    """`jobcore serve` running on a database; `client(token)` talks to it."""

    started: ClassVar[list[Hub]] = []  # every hub of this test run, for `reap_started_since`

    def __init__(
        self, db: Path, *args: str, env: dict[str, str] | None = None, port: int | None = None
    ) -> None:
        self.db = db
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = env or subprocess_env()
        self.log = db.with_name(db.name + f".hub-{self.port}.log")
        self._log_file = open(self.log, "w")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [*JOBCORE, "--db", str(db), "serve", "--port", str(self.port), *args],
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env=self.env,
        )
        Hub.started.append(self)
        try:
            self._wait_up()
        except BaseException:
            self.kill()  # a hub that never came up is not left running for the next test
            raise

    def _wait_up(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"jobcore serve exited {self.proc.returncode}: {self.output()}"
                )
            try:
                if httpx.get(self.url + "/api/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"jobcore serve did not come up: {self.output()}")

    def output(self) -> str:
        if not self._log_file.closed:
            self._log_file.flush()
        return self.log.read_text()

    def client(self, token: str | None = None, **options: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(
            base_url=self.url, headers=headers, timeout=options.pop("timeout", 30), **options
        )

    def terminate(self, timeout: float = 45.0) -> int:
        """SIGTERM and the exit code; a hub still running after `timeout` s is killed, and
        that is an AssertionError (its default outlasts the hub's 30 s shutdown_timeout)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"jobcore serve did not exit within {timeout} s of SIGTERM: {self.output()[-4000:]}"
            ) from None
        except BaseException:  # interrupted (a test timeout): never leave it running
            self.kill()
            raise
        self._log_file.close()
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        self._log_file.close()


def reap_started_since(count: int) -> None:
    """Kill and reap every hub started after the first `count` that is still running.

    A test that fails between starting a hub and stopping it would otherwise leave a live
    `jobcore serve` behind (and Popen's ResourceWarning in whichever test runs the GC next).
    """
    for hub in Hub.started[count:]:
        hub.kill()
    del Hub.started[count:]
