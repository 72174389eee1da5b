"""A real `jobcore serve` subprocess on 127.0.0.1 and a free port, for the hub's tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from testenv import subprocess_env

JOBCORE = [sys.executable, "-m", "jobcore"]

RUNNING: set[Hub] = set()  # hubs not yet stopped (conftest kills a test's leftovers)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def jobcore(
    db: Path | str, *args: str, env: dict[str, str] | None = None, check: bool = True
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
    """`jobcore serve` running on a database; `client(token)` talks to it.

    `db` is a SQLite file, or any `--db` URL with `logs`, the folder of the hub's log."""

    def __init__(
        self,
        db: Path | str,
        *args: str,
        env: dict[str, str] | None = None,
        port: int | None = None,
        logs: Path | None = None,
    ) -> None:
        self.db = db
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = env or subprocess_env()
        if isinstance(db, Path):
            self.log = db.with_name(db.name + f".hub-{self.port}.log")
        else:
            assert logs is not None, "a hub on a URL needs `logs`, the folder of its log"
            self.log = logs / f"hub-{self.port}.log"
        self._log_file = open(self.log, "w")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [*JOBCORE, "--db", str(db), "serve", "--port", str(self.port), *args],
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env=self.env,
        )
        RUNNING.add(self)
        try:
            self._wait_up()
        except BaseException:
            self.kill()
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

    def terminate(self, timeout: float = 30.0) -> int:
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
        RUNNING.discard(self)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self._log_file.close()
        RUNNING.discard(self)


@dataclass
class Tokens:
    admin: str
    read: str
    produce: str
    agent: str  # acts for agent "agent-1"
    revoked: str


def make_tokens(hub: Hub, db: Path | str) -> Tokens:
    admin = jobcore(db, "tokens", "create", "--name", "admin", "--scope", "admin").stdout.strip()
    made = {}
    with hub.client(admin) as client:
        for name, scope, agent in (
            ("reader", "read", None),
            ("producer", "produce", None),
            ("agent-1", "agent", "agent-1"),
            ("old", "read", None),
        ):
            answer = client.post(
                "/api/tokens", json={"name": name, "scope": scope, "agent_id": agent}
            )
            assert answer.status_code == 201, answer.text
            made[name] = answer.json()["token"]
        assert client.delete("/api/tokens/old").status_code == 204
    return Tokens(admin, made["reader"], made["producer"], made["agent-1"], made["old"])
