"""An open event stream ends within seconds of its token's revocation or its session's
sign-out (streams re-check who is reading, about every second)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import httpx
import pytest
from hubproc import Hub, Tokens
from sse import wait_open

ENDS_WITHIN = 6.0  # seconds (a re-check every ~1 s; slack for a loaded machine)


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(2) as executor:
        yield executor


def _read_until_closed(client: httpx.Client, opened: threading.Event, got: list[str]) -> float:
    """Read the stream until the hub ends it; the monotonic time it ended."""
    with client.stream("GET", "/api/events", timeout=60) as answer:
        assert answer.status_code == 200, answer.read()
        for line in answer.iter_lines():
            opened.set()
            if line.startswith("event:"):
                got.append(line)
    return time.monotonic()


def _ends_soon(reading: Future[float], since: float) -> None:
    ended = reading.result(timeout=ENDS_WITHIN + 10)
    assert ended - since < ENDS_WITHIN, f"the stream ran on {ended - since:.1f} s"


def _token(admin: httpx.Client, name: str) -> str:
    made = admin.post("/api/tokens", json={"name": name, "scope": "read"})
    assert made.status_code == 201, made.text
    return str(made.json()["token"])


def test_a_revoked_tokens_stream_ends(hub: Hub, tokens: Tokens, pool: ThreadPoolExecutor) -> None:
    with hub.client(tokens.admin) as admin:
        token = _token(admin, "stream-revoked")
        opened, got = threading.Event(), []
        with hub.client(token) as reader:
            reading = pool.submit(_read_until_closed, reader, opened, got)
            wait_open(opened, reading)
            assert admin.post("/api/jobs", json={"type": "noop"}).status_code == 201
            deadline = time.monotonic() + 10
            while not got and time.monotonic() < deadline:
                time.sleep(0.05)
            assert got, "the stream delivered nothing before the revocation"
            assert admin.delete("/api/tokens/stream-revoked").status_code == 204
            revoked = time.monotonic()
            for _ in range(3):  # the hub goes on with its work meanwhile
                admin.post("/api/jobs", json={"type": "noop"})
            _ends_soon(reading, revoked)
            assert reader.get("/api/events").status_code == 401


def test_a_signed_out_dashboard_sessions_stream_ends(
    hub: Hub, tokens: Tokens, pool: ThreadPoolExecutor
) -> None:
    with hub.client(tokens.admin) as admin:
        token = _token(admin, "stream-session")
    with httpx.Client(base_url=hub.url, timeout=30) as browser:
        signed = browser.post("/ui/login", data={"token": token}, follow_redirects=False)
        assert signed.status_code == 303, signed.text
        page = browser.get("/ui/jobs")
        assert page.status_code == 200
        csrf = page.text.split('name="csrf_token" value="')[1].split('"')[0]
        opened = threading.Event()
        reading = pool.submit(_read_until_closed, browser, opened, [])
        wait_open(opened, reading)
        out = browser.post("/ui/logout", data={"csrf_token": csrf}, follow_redirects=False)
        assert out.status_code == 303
        _ends_soon(reading, time.monotonic())
