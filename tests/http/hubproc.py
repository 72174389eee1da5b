"""A real `jobcore serve` subprocess on 127.0.0.1 and a free port, for the hub's tests."""

from __future__ import annotations

import os
import re
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


# requests naming a NUL character where no text field may hold one (SQLite and PostgreSQL)
NUL_BODIES = [
    ("/api/jobs", {"type": "noop", "queue": "a\x00b"}),
    ("/api/jobs", {"type": "noop", "idempotency_key": "a\x00b"}),
    ("/api/jobs", {"type": "no\x00op"}),
    ("/api/jobs/batch", {"jobs": [{"type": "noop"}, {"type": "noop", "queue": "\x00"}]}),
    ("/api/queue", {"type": "a\x00b", "data": {}}),
    ("/api/workers/register", {"worker_id": "agent-1", "name": "a\x00b"}),
    ("/api/workers/register", {"worker_id": "agent-1", "tags": ["\x00"]}),
    ("/api/jobs/claim", {"worker_id": "agent-1", "queues": ["a\x00b"]}),
    ("/api/jobs/cancel", {"queue": "a\x00b"}),
]
NUL_URLS = ["/api/jobs?queue=a%00b", "/api/jobs?q=a%00b", "/api/jobs?worker=%00", "/api/jobs/a%00b"]


# dashboard bulk forms whose filter holds a NUL (a form body: not checked with the URL)
NUL_BULK_FORMS = [
    {"action": "cancel", "queue": "a\x00b"},
    {"action": "cancel", "q": "a\x00"},
    {"action": "cancel", "worker": "w\x00"},
    {"action": "retry", "type": "\x00"},
]


def dashboard_bulk_with_nul(hub: Hub, admin: str) -> None:
    """Sign in to the dashboard; each of NUL_BULK_FORMS is a 400 naming NUL; a pending job
    stays pending."""
    with hub.client(admin) as api:
        job = api.post("/api/jobs", json={"type": "noop"}).json()["id"]
    with hub.client() as browser:
        signed_in = browser.post("/ui/login", data={"token": admin, "next": "/ui/jobs"})
        assert signed_in.status_code == 303, signed_in.text
        found = re.search(r'name="csrf_token" value="([^"]+)"', browser.get("/ui/jobs").text)
        assert found is not None
        for form in NUL_BULK_FORMS:
            answer = browser.post("/ui/bulk", data={**form, "csrf_token": found.group(1)})
            assert answer.status_code == 400, (form, answer.status_code, answer.text[:300])
            assert "NUL" in answer.text, form
    with hub.client(admin) as api:
        assert api.get(f"/api/jobs/{job}").json()["status"] == "pending"


BIG = "a" * 400_000  # a search for NEEDLE compares ~200 characters at each of its positions
NEEDLE = "a" * 199 + "b"  # not in BIG: each such row is examined in full


def search_pages(client: httpx.Client, **params: Any) -> tuple[list[str], int, str | None]:
    """(ids found, pages, the first page's next_cursor), following every cursor."""
    found: list[str] = []
    pages, first, cursor = 0, None, None
    while True:
        answer = client.get(
            "/api/jobs", params={**params, **({"cursor": cursor} if cursor else {})}
        )
        assert answer.status_code == 200, answer.text
        page = answer.json()
        found.extend(job["id"] for job in page["jobs"])
        pages += 1
        cursor = page["next_cursor"]
        if pages == 1:
            first = cursor
        if cursor is None:
            return found, pages, first
        assert pages < 1000


class Hub:
    """`jobcore serve` running on a database; `client(token)` talks to it.

    `db` is a SQLite file, or any `--db` URL with `logs`, the folder of the hub's log."""

    def __init__(
        self,
        db: Path | str,
        *args: str,
        env: dict[str, str] | None = None,
        port: int | None = None,
        log: Path | None = None,
        logs: Path | None = None,
    ) -> None:
        """`db`: a SQLite file, or a store URL (then `log` names the hub's log file, or
        `logs` the folder it goes in)."""
        self.db = db
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = env or subprocess_env()
        if log is None and logs is not None:
            log = logs / f"hub-{self.port}.log"
        if log is None:
            assert isinstance(db, Path), "a store URL needs log= (a file) or logs= (a folder)"
            log = db.with_name(db.name + f".hub-{self.port}.log")
        self.log = log
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
