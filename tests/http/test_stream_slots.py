"""Event streams cannot take every connection of the hub.

Before the fix a stream counted as a request being answered, so it was never closed to
make room, and nothing bounded one token's streams: a read token's 16 streams on a hub of
`max_connections=16` left every other client, agents and admin included, with 503. Now a
token keeps at most `max_streams_per_token` streams (one more ends its oldest, which
resumes with `Last-Event-ID`), and when every connection is being answered the oldest
event stream is closed to make room; a long-poll claim never is.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
from hubproc import Hub, Tokens, make_tokens
from testenv import subprocess_env

from jobcore.storage.base import Storage

pytestmark = pytest.mark.skipif(
    not hasattr(Storage, "events_after"), reason="the store has no event log (storage v2)"
)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    env = subprocess_env(JOBCORE_HTTP_MAX_CONNECTIONS="16", JOBCORE_HTTP_MAX_STREAMS_PER_TOKEN="4")
    server = Hub(tmp_path_factory.mktemp("slots") / "jobs.db", "--lease", "30s", env=env)
    yield server
    assert server.terminate() == 0, server.output()


@pytest.fixture(scope="module")
def tokens(hub: Hub) -> Tokens:
    return make_tokens(hub, hub.db)


def _stream(hub: Hub, token: str) -> socket.socket:
    """An open event stream (its `retry:` line read)."""
    sock = socket.create_connection(("127.0.0.1", hub.port), timeout=10)
    sock.sendall(
        f"GET /api/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n".encode()
    )
    got = b""
    while b"retry:" not in got:
        chunk = sock.recv(65536)
        assert chunk, got
        got += chunk
    assert got.startswith(b"HTTP/1.1 200"), got
    return sock


def _rest(sock: socket.socket, within: float) -> tuple[bytes, bool]:
    """What arrives on `sock` within `within` seconds, and whether the stream ended."""
    sock.settimeout(0.2)
    got = b""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except ConnectionResetError:
            return got, True
        if not chunk:
            return got, True
        got += chunk
        if got.endswith(b"0\r\n\r\n"):  # the chunked answer's end
            return got, True
    return got, False


def test_one_more_stream_of_a_token_ends_its_oldest(hub: Hub, tokens: Tokens) -> None:
    socks = [_stream(hub, tokens.read) for _ in range(5)]
    try:
        got, ended = _rest(socks[0], 5)
        assert ended and b"max_streams_per_token=4" in got, got
        with hub.client(tokens.produce) as api:
            job = api.post("/api/jobs", json={"type": "noop"}).json()["id"]
        for sock in socks[1:]:  # the four newest still stream
            got, ended = _rest(sock, 0.5)
            while job.encode() not in got and not ended:
                more, ended = _rest(sock, 0.5)
                got += more
            assert not ended and job.encode() in got, got
        socks.append(_stream(hub, tokens.produce))  # another token's streams are its own
        got, ended = _rest(socks[1], 1)
        assert not ended, got
    finally:
        for sock in socks:
            sock.close()


def test_when_streams_hold_every_connection_the_oldest_makes_room_for_a_claim(
    hub: Hub, tokens: Tokens
) -> None:
    with hub.client(tokens.admin) as admin:
        made = admin.post("/api/tokens", json={"name": "reader-2", "scope": "read"})
        assert made.status_code == 201, made.text
    readers = (tokens.read, tokens.produce, tokens.admin, made.json()["token"])
    socks = [_stream(hub, token) for token in readers for _ in range(4)]  # all 16 connections
    try:
        with hub.client(tokens.agent) as agent:
            answer = agent.post("/api/jobs/claim", json={"worker_id": "agent-1", "wait": 0.5})
            assert answer.status_code in (200, 204), answer.text
        with hub.client(tokens.admin) as admin:
            assert admin.get("/api/stats").status_code == 200
        _, ended = _rest(socks[0], 2)
        assert ended  # the oldest stream made room (its client resumes)
    finally:
        for sock in socks:
            sock.close()
