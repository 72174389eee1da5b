"""Sign-in, sign-out and where a sign-in may lead, through the dashboard's routes (in-process)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from jobcore_http.dashboard import router
from jobcore_http.dashboard.access import safe_next
from jobcore_http.dashboard.session import token_hash

from jobcore import Queue


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FastAPI]:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    made = FastAPI()
    with Queue(str(tmp_path / "jobs.db")) as queue:
        made.state.queue = queue
        made.state.token_lookup = {
            token_hash("r"): ("viewer", "read"),
            token_hash("a"): ("bot", "agent"),
        }.get
        made.include_router(router)
        yield made
        if hasattr(made.state, "dashboard"):  # made by the first page served
            made.state.dashboard.close()


def test_sign_in_leads_back_and_sign_out_ends_the_session(app: FastAPI) -> None:
    client = TestClient(app)
    first = client.get("/ui/jobs?type=x", follow_redirects=False)
    assert first.status_code == 303 and first.headers["location"].startswith("/ui/login?next=")
    signed = client.post(
        "/ui/login", data={"token": "r", "next": "/ui/jobs?type=x"}, follow_redirects=False
    )
    assert signed.status_code == 303 and signed.headers["location"] == "/ui/jobs?type=x"
    cookie = signed.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    page = client.get("/ui/jobs?type=x")
    assert page.status_code == 200 and "viewer" in page.text
    csrf = page.text.split('name="csrf_token" value="')[1].split('"')[0]
    assert (
        client.post("/ui/logout", data={"csrf_token": csrf}, follow_redirects=False).status_code
        == 303
    )
    assert client.get("/", follow_redirects=False).status_code == 303


@pytest.mark.parametrize(("token", "status"), [("nope", 401), ("a", 401), ("", 401)])
def test_unknown_and_agent_tokens_cannot_sign_in(app: FastAPI, token: str, status: int) -> None:
    answer = TestClient(app).post("/ui/login", data={"token": token}, follow_redirects=False)
    assert answer.status_code == status and "set-cookie" not in answer.headers


def test_sign_in_posted_from_another_site_is_refused(app: FastAPI) -> None:
    answer = TestClient(app).post(
        "/ui/login",
        data={"token": "r"},
        headers={"origin": "https://evil.example"},
        follow_redirects=False,
    )
    assert answer.status_code == 403 and "set-cookie" not in answer.headers


def test_without_auth_the_dashboard_opens_a_session_by_itself(app: FastAPI) -> None:
    app.state.auth_disabled = True
    answer = TestClient(app).get("/ui/workers")
    assert answer.status_code == 200 and "(no auth)" in answer.text


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("/ui/jobs?a=1", "/ui/jobs?a=1"),
        ("//evil.example/", "/"),
        ("https://x/", "/"),
        ("/\\evil", "/"),
        (None, "/"),
    ],
)
def test_only_same_site_paths_are_followed(target: str | None, expected: str) -> None:
    assert safe_next(target) == expected
