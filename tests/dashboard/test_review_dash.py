"""Hostile review of the dashboard (issue 11): XSS, CSRF, scopes, cookies, redirects."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from jobcore_http.dashboard import router
from jobcore_http.dashboard.session import token_hash

from jobcore import Queue
from jobcore.models import NewJob
from jobcore.storage.sqlite import SQLiteStorage
from jobcore.testing.helpers import drain
from jobcore.timeutil import now_ms

EVIL = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FastAPI]:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("JOBCORE_BACKOFF_BASE", "0.01")
    made = FastAPI()
    with Queue(str(tmp_path / "jobs.db")) as queue:
        made.state.queue = queue
        made.state.token_lookup = {
            token_hash("r"): ("viewer", "read"),
            token_hash("p"): ("ops", "produce"),
        }.get
        made.include_router(router)
        yield made
        if hasattr(made.state, "dashboard"):
            made.state.dashboard.close()


def _client(app: FastAPI, token: str) -> TestClient:
    client = TestClient(app)
    signed = client.post("/ui/login", data={"token": token}, follow_redirects=False)
    assert signed.status_code == 303
    return client


def _evil_jobs(queue: Queue) -> tuple[str, str]:
    failed = queue.enqueue("noop", {"fail": True}, queue=EVIL, max_attempts=1)
    drain(queue, worker_id=EVIL)
    errors = json.dumps([{"attempt": 1, "error": EVIL, "worker": EVIL, "at": 1}])
    path = queue.storage.path  # type: ignore[attr-defined]
    with sqlite3.connect(path) as db:  # an error text a handler could raise
        db.execute(
            "UPDATE jobs SET last_error = ?, errors = ? WHERE id = ?",
            (EVIL, errors, failed.job.id),
        )
    [odd] = queue.storage.insert(
        [
            NewJob(
                id="review-odd-type",
                type=EVIL,
                queue=EVIL,
                payload={"x": EVIL},
                priority=0,
                max_attempts=1,
                run_at=None,
                timeout_ms=None,
                idempotency_key=None,
                meta={EVIL: EVIL},
            )
        ]
    )
    return failed.job.id, odd.job.id


def test_payloads_errors_type_queue_and_worker_names_are_escaped_everywhere(
    app: FastAPI,
) -> None:
    failed_id, odd_id = _evil_jobs(app.state.queue)
    client = _client(app, "p")
    pages = [
        "/",
        "/ui/jobs",
        f"/ui/jobs?type={EVIL}",
        f"/ui/jobs?q={EVIL}",
        f"/ui/jobs/{failed_id}",
        f"/ui/jobs/{odd_id}",
        "/ui/workers",
        "/ui/dead-letters",
        "/ui/bulk?action=retry&status=failed",
    ]
    for url in pages:
        answer = client.get(url)
        assert answer.status_code in (200, 400), (url, answer.status_code)
        assert "<script>alert" not in answer.text, url
        assert "<img src=x" not in answer.text, url
        assert "default-src 'self'" in answer.headers["content-security-policy"]
    for url in (f"/ui/jobs/{failed_id}", f"/ui/jobs/{odd_id}", "/ui/jobs"):
        assert "&lt;script&gt;alert(1)" in client.get(url).text, url  # shown, escaped


def test_a_read_session_sees_no_action_and_its_forged_posts_are_refused(app: FastAPI) -> None:
    failed_id, _ = _evil_jobs(app.state.queue)
    client = _client(app, "r")
    page = client.get(f"/ui/jobs/{failed_id}")
    assert page.status_code == 200
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert csrf is not None  # the sign-out form
    actions = re.findall(r'<form[^>]*action="([^"]+)"', page.text)
    assert all(a == "/ui/logout" for a in actions), actions
    assert "Retry all matching" not in client.get("/ui/jobs").text
    for url, data in [
        (f"/ui/jobs/{failed_id}/retry", {"csrf_token": csrf.group(1)}),
        ("/ui/bulk", {"csrf_token": csrf.group(1), "action": "retry", "status": "failed"}),
        ("/ui/dead-letters/retry", {"csrf_token": csrf.group(1), "signature": "x"}),
    ]:
        answer = client.post(url, data=data, follow_redirects=False)
        assert answer.status_code == 403, (url, answer.status_code)
    assert app.state.queue.get(failed_id).status == "failed"


@pytest.mark.parametrize("token", [None, "", "0" * 40, "wrong"])
def test_actions_without_the_right_csrf_token_are_refused(app: FastAPI, token: str | None) -> None:
    failed_id, _ = _evil_jobs(app.state.queue)
    client = _client(app, "p")
    data = {} if token is None else {"csrf_token": token}
    for url, extra in [
        (f"/ui/jobs/{failed_id}/retry", {}),
        ("/ui/bulk", {"action": "retry", "status": "failed"}),
    ]:
        answer = client.post(url, data={**data, **extra}, follow_redirects=False)
        assert answer.status_code == 403, (url, answer.status_code)
    assert app.state.queue.get(failed_id).status == "failed"


def test_a_signed_out_cookie_replayed_is_refused(app: FastAPI) -> None:
    client = _client(app, "p")
    cookie = client.cookies.get("jobcore_session")
    assert cookie is not None
    page = client.get("/ui/jobs")
    csrf = page.text.split('name="csrf_token" value="')[1].split('"')[0]
    assert client.post("/ui/logout", data={"csrf_token": csrf}).status_code == 200
    replay = TestClient(app, cookies={"jobcore_session": cookie})
    assert replay.get("/ui/jobs", follow_redirects=False).status_code == 303


@pytest.mark.parametrize(
    "target", ["//evil.com", "/\\evil.com", "/\t/evil.com", "https://evil.com", "javascript:x"]
)
def test_sign_in_never_leads_off_site(app: FastAPI, target: str) -> None:
    client = TestClient(app)
    answer = client.post("/ui/login", data={"token": "r", "next": target}, follow_redirects=False)
    location = answer.headers["location"]
    assert location.startswith("/") and not location.startswith("//")
    assert "\t" not in location and "\\" not in location


def test_stuck_leases_are_judged_by_the_store_clock_not_the_hub_process_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hub whose clock runs an hour ahead of the store must not call live leases expired."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    behind = 3_600_000
    storage = SQLiteStorage(tmp_path / "jobs.db", clock=lambda: now_ms() - behind)
    made = FastAPI()
    with Queue(storage=storage) as queue:
        made.state.queue = queue
        made.state.token_lookup = {token_hash("r"): ("viewer", "read")}.get
        made.include_router(router)
        job_id = queue.enqueue("noop", {}).job.id
        [claimed] = storage.claim(worker="w-live", limit=1, lease_ms=600_000)
        assert claimed.id == job_id
        client = _client(made, "r")
        overview = client.get("/")
        count = re.search(r'data-count="stuck">(\d+)<', overview.text)
        assert count is not None and count.group(1) == "0"
        workers = client.get("/ui/workers").text
        assert "lease expired" not in workers
        made.state.dashboard.close()
