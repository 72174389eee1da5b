"""The README's curl examples, run as written (the real `curl`) against a real hub.

Before the fix they sent `-d '{…}'` without a JSON content type: curl said
`application/x-www-form-urlencoded` and the hub answered 422 "Input should be a
valid dictionary". Only the placeholders are filled in: `$H`, `$TOKEN`, `$ID`,
`$LEASE`, `$SHA`, `admin.token` and the hub's address.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from hubproc import Hub, jobcore
from testenv import subprocess_env

README = Path(__file__).parents[2] / "README.md"

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="no curl binary")


def curl_examples() -> list[str]:
    """Every line of a ```sh block of the README that runs curl."""
    blocks = re.findall(r"```sh\n(.*?)```", README.read_text(), flags=re.S)
    return [line for block in blocks for line in block.splitlines() if line.startswith("curl ")]


def test_the_readme_has_its_curl_examples() -> None:
    lines = curl_examples()
    assert len(lines) >= 9
    assert any("/api/jobs/$ID/result" in line for line in lines)


def _run(hub: Hub, line: str, cwd: Path, **env: str) -> Any:
    """Run one example line in bash; its output parsed as JSON (None when empty)."""
    command = line.replace("localhost:8080", f"127.0.0.1:{hub.port}").replace(
        "127.0.0.1:8080", f"127.0.0.1:{hub.port}"
    )
    streaming = "/api/events" in command
    try:
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=cwd,
            env={"PATH": "/usr/bin:/bin", **env},
            capture_output=True,
            text=True,
            timeout=2 if streaming else 30,
        )
    except subprocess.TimeoutExpired as exc:  # an event stream runs until stopped
        assert streaming, line
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        assert out.startswith("retry:"), out
        return None
    assert done.returncode == 0, (line, done.stderr)
    if not done.stdout.strip():
        return None
    answer = json.loads(done.stdout)
    assert not (isinstance(answer, dict) and "error" in answer), (line, answer)
    return answer


def test_the_readme_curl_examples_work_as_written(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    hub = Hub(db, env=subprocess_env(JOBCORE_ALLOW_UNREGISTERED_TYPES="true"))
    try:
        admin = jobcore(db, "tokens", "create", "--name", "ops", "--scope", "admin").stdout.strip()
        produce = jobcore(db, "tokens", "create", "--name", "ci", "--scope", "produce").stdout
        agent = jobcore(db, "tokens", "create", "--name", "box-1", "--scope", "agent").stdout
        (tmp_path / "admin.token").write_text(admin + "\n")
        with hub.client(admin) as client:
            uploaded = client.post("/api/artifacts", content=b"#!/bin/sh\necho '{}'\n")
            assert uploaded.status_code in (200, 201), uploaded.text
        sha = uploaded.json()["sha256"]
        producer = {"TOKEN": produce.strip(), "H": f"Authorization: Bearer {produce.strip()}"}
        box = {"TOKEN": agent.strip(), "H": f"Authorization: Bearer {agent.strip()}"}
        ran = 0
        claimed: dict[str, str] = {}
        for line in curl_examples():
            if "/api/workers/register" in line or "/api/jobs/claim" in line or "$ID" in line:
                if "$ID" in line:  # each of heartbeat/result/fail gets a live claim
                    if not claimed:
                        with hub.client(admin) as client:
                            client.post("/api/jobs", json={"type": "shell-like", "payload": {}})
                        [claim] = [x for x in curl_examples() if "/api/jobs/claim" in x]
                        job = _run(hub, claim, tmp_path, **box)
                        claimed = {"ID": job["id"], "LEASE": job["lease_id"]}
                    answer = _run(hub, line, tmp_path, **box, **claimed)
                    if "/heartbeat" not in line:
                        assert answer["id"] == claimed["ID"]
                        claimed = {}  # that claim ended
                elif "/api/jobs/claim" in line:
                    with hub.client(admin) as client:
                        client.post("/api/jobs", json={"type": "shell-like", "payload": {}})
                    job = _run(hub, line, tmp_path, **box)
                    claimed = {"ID": job["id"], "LEASE": job["lease_id"]}
                else:
                    _run(hub, line, tmp_path, **box)
            else:
                _run(hub, line, tmp_path, SHA=sha, **producer)
            ran += 1
        assert ran == len(curl_examples())
        with hub.client(admin) as client:
            jobs = client.get("/api/jobs", params={"limit": 100}).json()["jobs"]
        statuses = sorted(job["status"] for job in jobs)
        assert "completed" in statuses and "scheduled" in statuses  # result, then fail (retry)
        assert {"shell", "exec"} <= {job["type"] for job in jobs}
    finally:
        assert hub.terminate() == 0, hub.output()


def test_a_form_body_gets_a_422_saying_to_send_json(tmp_path: Path) -> None:
    hub = Hub(tmp_path / "jobs.db", "--insecure-no-auth")
    try:
        answer = httpx.post(
            hub.url + "/api/jobs",
            content=b'{"type": "noop"}',
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
        assert answer.status_code == 422, answer.text
        error = answer.json()["error"]
        assert "Content-Type: application/json" in error and "must be JSON" in error, error
        missing = httpx.post(hub.url + "/api/jobs/claim", content=b'{"worker_id": "a"}')
        assert missing.status_code == 422
        assert "no Content-Type" in missing.json()["error"]
    finally:
        assert hub.terminate() == 0, hub.output()
