"""examples/fastapi_app end to end: real uvicorn, real PostgreSQL, `jobcore run`, a mail API."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import httpx
import psycopg
import pytest
from testenv import LocalHTTPServer, subprocess_env, wait_for

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fastapi_app"
SENT: list[dict[str, object]] = []


class MailAPI(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        SENT.append(json.loads(self.rfile.read(int(self.headers["content-length"]))))
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def mail_api() -> Iterator[LocalHTTPServer]:
    SENT.clear()
    server = LocalHTTPServer(MailAPI)
    yield server
    server.close()


def test_signup_row_and_welcome_job_commit_together_and_the_job_calls_the_api(
    pg_server_database: str, mail_api: LocalHTTPServer, tmp_path: Path
) -> None:
    app_schema = f"app{secrets.token_hex(3)}"
    with psycopg.connect(pg_server_database, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {app_schema}")
    port = free_port()
    env = subprocess_env(
        APP_DATABASE_URL=pg_server_database,
        APP_SCHEMA=app_schema,
        JOBCORE_DB=f"{pg_server_database}?schema=jobs{secrets.token_hex(3)}",
        JOBCORE_PLUGINS="welcome_jobs",
        WELCOME_API_URL=f"{mail_api.url}/send",
    )
    env["PYTHONPATH"] = os.pathsep.join([str(EXAMPLE), env["PYTHONPATH"]])
    procs: list[subprocess.Popen[bytes]] = []
    logs = [tmp_path / "uvicorn.log", tmp_path / "worker.log"]
    commands = [
        [sys.executable, "-m", "uvicorn", "app:app", "--host", "127.0.0.1", "--port", str(port)],
        [sys.executable, "-m", "jobcore", "run"],
    ]
    try:
        for command, log in zip(commands, logs, strict=True):
            with open(log, "wb") as out:
                procs.append(
                    subprocess.Popen(command, env=env, cwd=EXAMPLE, stdout=out, stderr=out)
                )
        base = f"http://127.0.0.1:{port}"

        def up() -> bool:
            try:
                return httpx.get(f"{base}/docs").status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(up, timeout=60)
        made = httpx.post(f"{base}/signups", json={"email": "ada@example.org"})
        assert made.status_code == 201, made.text
        signup, job_id = made.json()["id"], made.json()["job"]
        wait_for(lambda: SENT, timeout=60)
        assert [{"to": "ada@example.org", "signup": signup}] == SENT

        def completed() -> dict[str, object] | None:
            status = httpx.get(f"{base}/signups/{signup}/job/{job_id}").json()
            return status if status["status"] == "completed" else None

        status = wait_for(completed, timeout=30)
        assert status["result"] == {"status": 200, "to": "ada@example.org"}
        # a duplicate fails at its row, an unknown referrer after the enqueue: neither leaves
        # a row or a job
        assert httpx.post(f"{base}/signups", json={"email": "ada@example.org"}).status_code == 409
        refused = httpx.post(
            f"{base}/signups", json={"email": "bo@example.org", "referred_by": 999}
        )
        assert refused.status_code == 422, refused.text
        with psycopg.connect(pg_server_database) as conn:
            rows = conn.execute(f"SELECT email FROM {app_schema}.signups").fetchall()
            schema = env["JOBCORE_DB"].split("schema=")[1]
            jobs = conn.execute(f"SELECT count(*) FROM {schema}.jobs").fetchone()
        assert rows == [("ada@example.org",)]
        assert jobs == (1,)
        assert [{"to": "ada@example.org", "signup": signup}] == SENT
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        codes = [proc.wait(timeout=60) for proc in procs]
        # uvicorn ends by the signal after its graceful shutdown; the worker exits 0
        assert codes[:1] in ([0], [-signal.SIGTERM]), logs[0].read_text()[-3000:]
        assert codes[1:] in ([], [0]), logs[1].read_text()[-3000:]
