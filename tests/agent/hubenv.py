"""Real hub and agent processes on 127.0.0.1 for the agent's end-to-end tests."""

from __future__ import annotations

import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import httpx
from testenv import HELPERS, subprocess_env, wait_for

HERE = Path(__file__).parent
JOBCORE = [sys.executable, "-m", "jobcore"]
RATES = {"JOBCORE_PLUGINS": "jobcore_rates_plugin"}  # the rate-limit tests' job types


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def env(**extra: str) -> dict[str, str]:
    base = subprocess_env(**extra)
    base["PYTHONPATH"] = os.pathsep.join([str(HERE), base["PYTHONPATH"]])
    base["JOBCORE_PLUGINS"] = extra.get("JOBCORE_PLUGINS", "jobcore_test_plugin,agent_test_plugin")
    return base


def jobcore(db: str, *args: str) -> str:
    done = subprocess.run(
        [*JOBCORE, "--db", db, *args], env=env(), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


class Hub:
    """`jobcore serve` on a free port; `admin` is an httpx client with an admin token."""

    def __init__(
        self,
        tmp: Path,
        *,
        lease: str = "5s",
        extra: tuple[str, ...] = (),
        env_extra: dict[str, str] | None = None,
        verify: ssl.SSLContext | bool = True,
        db: Path | str | None = None,
    ) -> None:
        self.tmp = tmp
        self.env_extra = env_extra or {}
        self.verify = verify  # trusting the test CA of a hub serving HTTPS with a test certificate
        self.db = str(db or tmp / "hub.db")  # a SQLite file, or a store URL (PostgreSQL)
        self.port = 0  # the first start picks a free port; a restart reuses it
        self.url = ""
        self.lease = lease
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()
        self.admin_token = self.token("admin-test", "admin")
        self.admin = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {self.admin_token}"},
            timeout=30,
            verify=self.verify,
        )

    def start(self) -> None:
        log_path = self.tmp / "hub.log"
        offset = log_path.stat().st_size if log_path.exists() else 0
        with open(log_path, "ab") as log:
            self.proc = self._spawn_hub(log)
        if not self.port:
            scheme, port = wait_for(lambda: self._announced(log_path, offset), timeout=30)
            self.port = int(port)
            self.url = f"{scheme}://127.0.0.1:{self.port}"
        wait_for(self._healthy, timeout=30)

    def _announced(self, log_path: Path, offset: int) -> tuple[str, str] | None:
        assert self.proc is not None and self.proc.poll() is None, self.log()
        with open(log_path, "rb") as handle:
            handle.seek(offset)
            text = handle.read().decode(errors="replace")
        match = re.search(r"listening on (https?)://127\.0\.0\.1:(\d+)", text)
        return (match.group(1), match.group(2)) if match else None

    def _spawn_hub(self, log: IO[bytes]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                *JOBCORE,
                "--db",
                self.db,
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--lease",
                self.lease,
                *self.extra,
            ],
            env=env(**self.env_extra),
            stdout=log,
            stderr=log,
        )

    def _healthy(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, self.log()
        try:
            answer = httpx.get(f"{self.url}/api/health", timeout=1, verify=self.verify)
            return answer.status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(45)  # the hub's own shutdown_timeout is 30 s
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                raise AssertionError(f"the hub did not exit within 45 s of {sig!r}") from None
            finally:
                self.proc = None
        self.proc = None

    def log(self) -> str:
        path = self.tmp / "hub.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def token(self, name: str, scope: str, agent: str | None = None) -> str:
        args = ["tokens", "create", "--name", name, "--scope", scope]
        if agent is not None:
            args += ["--agent", agent]
        return jobcore(self.db, *args).strip()

    def enqueue(self, type: str, payload: dict[str, Any], **options: Any) -> dict[str, Any]:
        response = self.admin.post("/api/jobs", json={"type": type, "payload": payload, **options})
        assert response.status_code in (200, 201), response.text
        job: dict[str, Any] = response.json()
        return job

    def job(self, job_id: str) -> dict[str, Any]:
        response = self.admin.get(f"/api/jobs/{job_id}")
        assert response.status_code == 200, response.text
        job: dict[str, Any] = response.json()
        return job

    def wait_status(self, job_id: str, *statuses: str, timeout: float = 30) -> dict[str, Any]:
        def done() -> dict[str, Any] | None:
            job = self.job(job_id)
            return job if job["status"] in statuses else None

        result: dict[str, Any] = wait_for(done, timeout=timeout)
        return result

    def close(self) -> None:
        self.admin.close()
        self.stop()


class Agent:
    """`jobcore agent` with its own agent token; stderr kept in `<tmp>/agent-<id>.log`."""

    def __init__(
        self,
        hub: Hub,
        worker_id: str,
        *,
        hub_url: str | None = None,
        cache_dir: Path | None = None,
        token: str | None = None,
        extra: tuple[str, ...] = (),
        env_extra: dict[str, str] | None = None,
        token_in_env: bool = False,
    ) -> None:
        self.hub = hub
        self.worker_id = worker_id
        self.token_file = hub.tmp / f"token-{worker_id}"
        if not self.token_file.exists() or token is not None:
            self.token_file.write_text(
                (token or hub.token(f"agent-{worker_id}", "agent", worker_id)) + "\n"
            )
        self.log_path = hub.tmp / f"agent-{worker_id}.log"
        self.cache_dir = cache_dir or hub.tmp / f"cache-{worker_id}"
        self.args = [
            *JOBCORE,
            "--db",
            str(hub.tmp / "unused-by-agents.db"),
            "agent",
            "--hub",
            hub_url or hub.url,
            *(() if token_in_env else ("--token-file", str(self.token_file))),
            "--worker-id",
            worker_id,
            "--cache-dir",
            str(self.cache_dir),
            *extra,
        ]
        self.env = env(**{"JOBCORE_AGENT_MAX_BACKOFF": "1s", **(env_extra or {})})
        if token_in_env:  # as `JOBCORE_AGENT_TOKEN` instead of `--token-file`
            self.env["JOBCORE_AGENT_TOKEN"] = self.token_file.read_text().strip()
        self.proc: subprocess.Popen[bytes] = self._spawn()

    def _spawn(self) -> subprocess.Popen[bytes]:
        with open(self.log_path, "ab") as log:
            return subprocess.Popen(self.args, env=self.env, stdout=log, stderr=log)

    def restart(self) -> None:
        self.proc = self._spawn()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 60) -> int:
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def registered(self) -> bool:
        workers = self.hub.admin.get("/api/workers").json()["workers"]
        return any(w["worker_id"] == self.worker_id for w in workers)


def wait_until(predicate: Any, timeout: float = 30.0) -> Any:
    return wait_for(predicate, timeout=timeout)


def pause(seconds: float) -> None:
    """Let time pass for a lease to expire (not a speed assertion)."""
    time.sleep(seconds)


__all__ = ["HELPERS", "Agent", "Hub", "free_port", "pause", "wait_until"]
