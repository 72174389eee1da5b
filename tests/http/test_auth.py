"""Authorization matrix: every route, with every scope and with no, invalid and revoked tokens."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from hubproc import Hub, Tokens

W = {"worker_id": "agent-1"}

# (method, path, json body, scope the route needs); "agent" routes act for agent-1
ROUTES: list[tuple[str, str, Any, str]] = [
    ("POST", "/api/jobs", {"type": "noop", "queue": "authz"}, "produce"),
    ("POST", "/api/jobs/batch", {"jobs": [{"type": "noop", "queue": "authz"}]}, "produce"),
    ("GET", "/api/jobs", None, "read"),
    ("GET", "/api/jobs/some-id", None, "read"),
    ("DELETE", "/api/jobs/some-id", None, "produce"),
    ("POST", "/api/jobs/some-id/retry", None, "produce"),
    ("POST", "/api/jobs/retry", {"queue": "authz-none"}, "produce"),
    ("POST", "/api/jobs/cancel", {"queue": "authz-none"}, "produce"),
    ("GET", "/api/stats", None, "read"),
    ("POST", "/api/workers/register", W, "agent"),
    ("GET", "/api/workers", None, "read"),
    ("POST", "/api/jobs/claim", {**W, "queues": ["authz-none"]}, "agent"),
    ("POST", "/api/jobs/some-id/heartbeat", W, "agent"),
    ("POST", "/api/jobs/some-id/result", W, "agent"),
    ("POST", "/api/jobs/some-id/fail", W, "agent"),
    ("POST", "/api/jobs/some-id/release", W, "agent"),
    ("POST", "/api/workers/agent-1/drain", None, "admin"),
    ("GET", "/api/events", None, "read"),
    ("GET", "/api/jobs/events", None, "read"),
    ("POST", "/api/queue", {"type": "noop", "data": {}}, "produce"),
    ("GET", "/api/queue", None, "agent"),
    ("PUT", "/api/queue/some-id", {"status": "completed"}, "agent"),
    ("GET", "/api/tokens", None, "admin"),
    ("POST", "/api/tokens", {"name": "matrix", "scope": "read"}, "admin"),
    ("DELETE", "/api/tokens/nobody", None, "admin"),
    ("POST", "/api/jobs/reports", {**W, "reports": []}, "agent"),
    ("GET", "/api/queues", None, "read"),
    ("GET", "/api/schedules", None, "read"),
    ("POST", "/api/queues/authz-paused/pause", {"reason": "matrix"}, "produce"),
    ("POST", "/api/queues/authz-paused/resume", None, "produce"),
    ("POST", "/api/types/authz-type/pause", {"reason": "matrix"}, "produce"),
    ("POST", "/api/types/authz-type/resume", None, "produce"),
    ("GET", "/api/limits", None, "read"),
    ("PUT", "/api/queues/authz-paused/limit", {"concurrency": 5}, "admin"),
    ("DELETE", "/api/queues/authz-paused/limit", None, "admin"),
    ("PUT", "/api/types/authz-type/limit", {"concurrency": 5}, "admin"),
    ("DELETE", "/api/types/authz-type/limit", None, "admin"),
    ("PUT", "/api/types/authz-type/key-limit", {"concurrency": 5}, "admin"),
    ("DELETE", "/api/types/authz-type/key-limit", None, "admin"),
    ("POST", "/api/workers/limits", W, "agent"),
]

GRANTS = {
    "read": {"read"},
    "produce": {"read", "produce"},
    "agent": {"agent"},
    "admin": {"read", "produce", "agent", "admin"},
}

OPEN = ["/api/health", "/openapi.json", "/docs"]


def call(hub: Hub, token: str | None, method: str, path: str, body: Any) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(base_url=hub.url, headers=headers, timeout=30) as client:
        if path.endswith("/events"):
            with client.stream(method, path) as answer:
                return answer.status_code
        return client.request(method, path, json=body).status_code


def token_for(tokens: Tokens, scope: str) -> str:
    return str(getattr(tokens, scope))


def test_the_matrix_covers_every_api_route(hub: Hub) -> None:
    spec = httpx.get(hub.url + "/openapi.json").json()
    documented = {
        (method.upper(), path)
        for path, ops in spec["paths"].items()
        for method in ops
        if path.startswith("/api/") and path != "/api/health" and "artifacts" not in path
    }
    covered = {
        (
            method,
            path.replace("some-id", "{job_id}")
            .replace("/workers/agent-1/", "/workers/{worker_id}/")
            .replace("/tokens/nobody", "/tokens/{name}")
            .replace("/queue/some-id", "/queue/{job_id}")
            .replace("/queues/authz-paused/", "/queues/{name}/")
            .replace("/types/authz-type/", "/types/{name}/"),
        )
        for method, path, _, _ in ROUTES
    }
    assert documented <= covered, documented - covered


@pytest.mark.parametrize(
    ("method", "path", "body", "needed"), ROUTES, ids=[f"{m} {p}" for m, p, _, _ in ROUTES]
)
def test_no_invalid_or_revoked_token_is_401(
    hub: Hub, tokens: Tokens, method: str, path: str, body: Any, needed: str
) -> None:
    for token in (None, "jch_not-a-real-token", tokens.revoked):
        assert call(hub, token, method, path, body) == 401, (token, method, path)


@pytest.mark.parametrize("scope", ["read", "produce", "agent", "admin"])
@pytest.mark.parametrize(
    ("method", "path", "body", "needed"), ROUTES, ids=[f"{m} {p}" for m, p, _, _ in ROUTES]
)
def test_each_scope_reaches_exactly_its_routes(
    hub: Hub, tokens: Tokens, scope: str, method: str, path: str, body: Any, needed: str
) -> None:
    status = call(hub, token_for(tokens, scope), method, path, body)
    if needed in GRANTS[scope]:
        assert status not in (401, 403), (scope, method, path, status)
    else:
        assert status == 403, (scope, method, path, status)


@pytest.mark.parametrize("path", OPEN)
def test_open_routes_need_no_token(hub: Hub, path: str) -> None:
    assert httpx.get(hub.url + path).status_code == 200


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/workers/register", {"worker_id": "agent-2"}),
        ("/api/jobs/claim", {"worker_id": "agent-2"}),
        ("/api/jobs/some-id/heartbeat", {"worker_id": "agent-2"}),
        ("/api/jobs/some-id/result", {"worker_id": "agent-2"}),
        ("/api/jobs/some-id/fail", {"worker_id": "agent-2"}),
        ("/api/jobs/some-id/release", {"worker_id": "agent-2"}),
        ("/api/jobs/reports", {"worker_id": "agent-2", "reports": []}),
        ("/api/workers/limits", {"worker_id": "agent-2"}),
    ],
)
def test_agent_token_acts_only_for_its_own_agent(
    hub: Hub, tokens: Tokens, path: str, body: Any
) -> None:
    with hub.client(tokens.agent) as client:
        answer = client.post(path, json=body)
    assert answer.status_code == 403
    assert "agent-1" in answer.json()["error"]


def test_malformed_authorization_header_is_401(hub: Hub) -> None:
    answer = httpx.get(hub.url + "/api/jobs", headers={"Authorization": "Basic abc"})
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"] == "Bearer"


def test_revocation_takes_effect_on_the_next_request(hub: Hub, tokens: Tokens) -> None:
    with hub.client(tokens.admin) as admin:
        token = admin.post("/api/tokens", json={"name": "short-lived", "scope": "read"}).json()[
            "token"
        ]
        with hub.client(token) as reader:
            assert reader.get("/api/stats").status_code == 200
            assert admin.delete("/api/tokens/short-lived").status_code == 204
            assert reader.get("/api/stats").status_code == 401


def test_tokens_never_reach_the_log(hub: Hub, tokens: Tokens) -> None:
    with hub.client(tokens.admin) as admin:
        made = admin.post("/api/tokens", json={"name": "secret-one", "scope": "read"}).json()[
            "token"
        ]
    httpx.get(hub.url + "/api/jobs", headers={"Authorization": f"Bearer {made}x"})
    log = hub.output()
    for token in (tokens.admin, tokens.read, tokens.produce, tokens.agent, made):
        assert token not in log
    import sqlite3

    with sqlite3.connect(hub.db) as db:
        stored = " ".join(str(row) for row in db.execute("SELECT * FROM hub_tokens"))
    assert made not in stored and tokens.admin not in stored
