"""A heartbeat's `progress` is checked for depth and size on input, as payloads are.

Before the fix a `progress` nested 800 deep was accepted (200) and kept, and from then on
`GET /api/workers` answered 500 to every reader until the claim ended; a large one was
kept in memory and sent in every listing."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
from hubproc import Hub, Tokens

DEEP = b"[" * 800 + b"]" * 800


def _claim(admin: httpx.Client, agent: httpx.Client) -> dict[str, Any]:
    queue = f"prog-{uuid.uuid4().hex[:6]}"
    assert admin.post("/api/jobs", json={"type": "noop", "queue": queue}).status_code == 201
    answer = agent.post("/api/jobs/claim", json={"worker_id": "agent-1", "queues": [queue]})
    assert answer.status_code == 200, answer.text
    job: dict[str, Any] = answer.json()
    return job


def _beat(agent: httpx.Client, job: dict[str, Any], progress: bytes) -> httpx.Response:
    body = b'{"worker_id":"agent-1","lease_id":"%s","progress":%s}' % (
        job["lease_id"].encode(),
        progress,
    )
    return agent.post(
        f"/api/jobs/{job['id']}/heartbeat",
        content=body,
        headers={"Content-Type": "application/json"},
    )


def test_a_deep_or_large_heartbeat_progress_is_refused_and_workers_still_answer(
    hub: Hub, tokens: Tokens
) -> None:
    with hub.client(tokens.admin) as admin, hub.client(tokens.agent) as agent:
        job = _claim(admin, agent)
        deep = _beat(agent, job, DEEP)
        assert deep.status_code in (400, 422), deep.text
        assert "deeper than 32" in deep.json()["error"]
        large = _beat(agent, job, b'"' + b"x" * 70_000 + b'"')
        assert large.status_code in (400, 422), large.text
        ok = _beat(agent, job, b'{"done": [1, {"of": [2]}]}')
        assert ok.status_code == 200, ok.text
        listing = admin.get("/api/workers")
        assert listing.status_code == 200, listing.text
        [me] = [w for w in listing.json()["workers"] if w["worker_id"] == "agent-1"]
        assert me["progress"] == {job["id"]: {"done": [1, {"of": [2]}]}}
        owner = {"worker_id": "agent-1", "lease_id": job["lease_id"]}
        assert agent.post(f"/api/jobs/{job['id']}/release", json=owner).status_code == 200


def test_a_deep_progress_in_a_batched_report_is_refused_alone(hub: Hub, tokens: Tokens) -> None:
    with hub.client(tokens.admin) as admin, hub.client(tokens.agent) as agent:
        job = _claim(admin, agent)
        item = b'{"job_id":"%s","lease_id":"%s","kind":"heartbeat","progress":%s}' % (
            job["id"].encode(),
            job["lease_id"].encode(),
            DEEP,
        )
        answer = agent.post(
            "/api/jobs/reports",
            content=b'{"worker_id":"agent-1","reports":[%s]}' % item,
            headers={"Content-Type": "application/json"},
        )
        assert answer.status_code == 200, answer.text
        [result] = answer.json()["results"]
        assert result["state"] == "refused" and "deeper than 32" in result["error"], result
        assert admin.get("/api/workers").status_code == 200
        owner = {"worker_id": "agent-1", "lease_id": job["lease_id"]}
        assert agent.post(f"/api/jobs/{job['id']}/release", json=owner).status_code == 200
