"""Poison values against a real hub: lone surrogates sent as raw bytes, NUL characters.

Before the fix a `result` (or heartbeat `progress`, or `PUT /api/queue` result) holding
the raw bytes `ED A0 80` (an encoded lone surrogate: `json.loads` passes it through) was
stored, and from then on `GET /api/jobs`, `GET /api/jobs/{id}` and the dashboard's job
page answered 400 and `GET /api/workers` 500, for everyone. A NUL in a name, id or
filter was accepted on SQLite and a 503 on PostgreSQL (tests/postgres covers that one).
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hubproc import NUL_BODIES, NUL_URLS, Hub, Tokens
from testenv import subprocess_env

JSON = {"content-type": "application/json"}
RAW = b"\xed\xa0\x80"  # U+D800 encoded as if it were a character: not UTF-8


def _unique(prefix: str = "q") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _rows(db: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT * FROM jobs ORDER BY id").fetchall()


@pytest.fixture(scope="module")
def hub(hub_db: Path) -> Iterator[Hub]:
    """This module's hub, with a lease longer than the module runs: the tests compare whole
    rows before and after, and a job claimed by an earlier test must not be swept meanwhile
    (a 30 s lease ran out on a loaded machine and the sweep changed the row)."""
    server = Hub(hub_db, "--lease", "1h", env=subprocess_env(JOBCORE_WAKE_CHECK_INTERVAL="0.002"))
    yield server
    assert server.terminate() == 0, server.output()


@pytest.fixture
def admin(hub: Hub, tokens: Tokens) -> Iterator[httpx.Client]:
    with hub.client(tokens.admin) as client:
        yield client


@pytest.fixture
def agent(hub: Hub, tokens: Tokens) -> Iterator[httpx.Client]:
    with hub.client(tokens.agent) as client:
        yield client


def _claimed(admin: httpx.Client, agent: httpx.Client) -> tuple[str, str]:
    queue = _unique()
    job = admin.post("/api/jobs", json={"type": "noop", "queue": queue}).json()
    answer = agent.post("/api/jobs/claim", json={"worker_id": "agent-1", "queues": [queue]})
    assert answer.status_code == 200, answer.text
    assert answer.json()["id"] == job["id"]
    return job["id"], answer.json()["lease_id"]


def _raw(template: str) -> bytes:
    """`template` as JSON bytes with each `@` replaced by the raw bytes ED A0 80."""
    return template.encode().replace(b"@", RAW)


def test_raw_surrogate_bytes_are_refused_on_every_entry_route(
    hub: Hub, hub_db: Path, admin: httpx.Client, agent: httpx.Client
) -> None:
    job_id, lease = _claimed(admin, agent)
    owner = f'"worker_id": "agent-1", "lease_id": "{lease}"'
    attempts = [
        (admin, "POST", "/api/jobs", '{"type": "record", "payload": {"log": "a@"}}'),
        (admin, "POST", "/api/jobs", '{"type": "record", "payload": {"@": "x"}}'),
        (admin, "POST", "/api/jobs", '{"type": "noop", "queue": "q@"}'),
        (admin, "POST", "/api/jobs", '{"type": "noop", "idempotency_key": "k@"}'),
        (admin, "POST", "/api/jobs/batch", '{"jobs": [{"type": "noop"}, {"type": "n@"}]}'),
        (admin, "POST", "/api/queue", '{"type": "noop", "data": {"deep": [["@"]]}}'),
        (agent, "POST", "/api/workers/register", '{"worker_id": "agent-1", "name": "@"}'),
        (agent, "POST", "/api/jobs/claim", '{"worker_id": "agent-1", "types": ["@"]}'),
        (agent, "POST", f"/api/jobs/{job_id}/heartbeat", f'{{{owner}, "progress": {{"p": "@"}}}}'),
        (agent, "POST", f"/api/jobs/{job_id}/result", f'{{{owner}, "result": "@"}}'),
        (agent, "POST", f"/api/jobs/{job_id}/result", f'{{{owner}, "result": {{"@": 1}}}}'),
        (agent, "POST", f"/api/jobs/{job_id}/fail", f'{{{owner}, "reason": "boom @"}}'),
        (agent, "PUT", f"/api/queue/{job_id}", '{"status": "completed", "result": ["@"]}'),
    ]
    before = _rows(hub_db)
    for client, method, path, template in attempts:
        answer = client.request(method, path, content=_raw(template), headers=JSON)
        assert answer.status_code == 400, (path, template, answer.text)
        assert "lone surrogate" in answer.json()["error"], answer.text
    assert _rows(hub_db) == before  # nothing written: the job is still claimed, as it was
    assert admin.get(f"/api/jobs/{job_id}").json()["status"] == "claimed"
    # the message names where the value sits
    answer = agent.post(
        f"/api/jobs/{job_id}/heartbeat",
        content=_raw(f'{{{owner}, "progress": {{"steps": [1, "@"]}}}}'),
        headers=JSON,
    )
    assert "progress.steps[1]" in answer.json()["error"]
    # the same bytes sent as another content type are refused too (never stored)
    answer = agent.post(
        f"/api/jobs/{job_id}/result",
        content=_raw(f'{{{owner}, "result": "@"}}'),
        headers={"content-type": "text/plain"},
    )
    assert answer.status_code in (400, 422), answer.text
    for path in ("/api/jobs", f"/api/jobs/{job_id}", "/api/workers"):
        assert admin.get(path).status_code == 200, path
    # valid text still goes through: a real non-BMP character, as bytes and as escapes
    done = agent.post(
        f"/api/jobs/{job_id}/result",
        content=f'{{{owner}, "result": "ok \U0001f600 \\ud83d\\ude00"}}'.encode(),
        headers=JSON,
    )
    assert done.status_code == 200, done.text
    assert done.json()["result"] == "ok \U0001f600 \U0001f600"


def test_a_stored_lone_surrogate_never_breaks_a_listing(
    hub: Hub, hub_db: Path, tokens: Tokens, admin: httpx.Client
) -> None:
    job = admin.post("/api/jobs", json={"type": "noop", "queue": _unique()}).json()
    with sqlite3.connect(hub_db) as conn:  # written before the check existed, or by Python
        conn.execute(
            "UPDATE jobs SET result = ?, errors = ? WHERE id = ?",
            (
                json.dumps({"out": "\ud800", "\udfff": 1}),  # JSON escapes: as the core writes
                json.dumps([{"attempt": 1, "error": "bad \udc80", "worker": "w", "at": 1}]),
                job["id"],
            ),
        )
    for path in ("/api/jobs", f"/api/jobs/{job['id']}", "/api/workers"):
        answer = admin.get(path)
        assert answer.status_code == 200, (path, answer.text)
    shown = admin.get(f"/api/jobs/{job['id']}").json()
    assert shown["result"] == {"out": "\ufffd", "\ufffd": 1}
    with hub.client() as browser:
        signed = browser.post("/ui/login", data={"token": tokens.read}, follow_redirects=False)
        assert signed.status_code == 303, signed.text
        page = browser.get(f"/ui/jobs/{job['id']}")
        assert page.status_code == 200, page.text[:300]
        assert "\ufffd" in page.text
        assert browser.get("/ui/jobs").status_code == 200


def test_nul_in_names_ids_and_filters_is_400_and_nothing_is_written(
    hub_db: Path, admin: httpx.Client
) -> None:
    before = _rows(hub_db)
    for path, body in NUL_BODIES:
        answer = admin.post(path, json=body)
        assert answer.status_code == 400, (path, body, answer.text)
        assert "NUL" in answer.json()["error"], answer.text
    for url in NUL_URLS:
        answer = admin.get(url)
        assert answer.status_code == 400, (url, answer.text)
        assert "NUL" in answer.json()["error"]
    assert admin.delete("/api/jobs/a%00b").status_code == 400
    assert _rows(hub_db) == before
    # payloads and results are JSON: NUL round-trips there
    job = admin.post("/api/jobs", json={"type": "record", "payload": {"log": "a\x00b"}})
    assert job.status_code == 201, job.text
    assert admin.get(f"/api/jobs/{job.json()['id']}").json()["payload"]["log"] == "a\x00b"
