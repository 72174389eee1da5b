"""Clients that send requests faster than they take the answers cannot hold the hub.

Before the fix uvicorn parsed every pipelined request it had read and read on after
each answer, so one anonymous connection sending requests without reading answers
grew the hub's memory without bound; and a connection whose answer sat unread (its
socket full) was neither idle nor waiting for its head, so it could never be evicted:
eight anonymous connections asking for `/openapi.json` and never reading took every
slot of a hub with `max_connections=8` for good (503 for everyone else).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hubproc import Hub
from jobcore_http.guard import MAX_PIPELINE
from testenv import subprocess_env

OPENAPI = b"GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n"  # ~60 KB answer, no token needed


def _hub(tmp_path: Path, **settings: str) -> Hub:
    env = subprocess_env(**{f"JOBCORE_HTTP_{k.upper()}": v for k, v in settings.items()})
    return Hub(tmp_path / "jobs.db", env=env)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    server = _hub(tmp_path_factory.mktemp("unread"), max_connections="8")
    yield server
    assert server.terminate() == 0, server.output()


def _not_reading(hub: Hub, request: bytes, times: int) -> socket.socket:
    """A connection that sends `request` `times` times and reads nothing."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    sock.connect(("127.0.0.1", hub.port))
    sock.sendall(request * times)
    return sock


def _read_all(sock: socket.socket, within: float) -> bytes:
    sock.settimeout(within)
    got = b""
    try:
        while chunk := sock.recv(1 << 20):
            got += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return got


def test_pipelined_requests_beyond_the_limit_close_the_connection(hub: Hub) -> None:
    with socket.create_connection(("127.0.0.1", hub.port), timeout=10) as sock:
        sock.sendall(b"GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n" * 2000)
        answers = _read_all(sock, within=10).count(b"HTTP/1.1 200")
    # the one being answered and those queued behind it, then the connection closed
    assert answers == MAX_PIPELINE + 1
    with socket.create_connection(("127.0.0.1", hub.port), timeout=10) as sock:
        sock.sendall(b"GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n" * 3)
        got = b""
        while got.count(b'{"status":"ok"}') < 3:  # a few pipelined requests are all answered
            chunk = sock.recv(65536)
            assert chunk, got
            got += chunk


def test_connections_not_taking_their_answers_are_evicted(hub: Hub) -> None:
    stalled = [_not_reading(hub, OPENAPI, 30) for _ in range(8)]
    try:
        # once the hub has filled their sockets (it waits for them to read: well within the
        # 30 s write timeout), a new client takes the place of one of them
        deadline = time.monotonic() + 15
        while (answer := httpx.get(hub.url + "/api/health", timeout=10)).status_code != 200:
            assert answer.status_code == 503, answer.text
            assert time.monotonic() < deadline, "stalled readers kept every connection slot"
            time.sleep(0.2)
        for _ in range(3):
            assert httpx.get(hub.url + "/api/health", timeout=10).status_code == 200
    finally:
        for sock in stalled:
            sock.close()


def test_an_answer_not_taken_within_the_timeout_closes_the_connection(tmp_path: Path) -> None:
    hub = _hub(tmp_path, body_timeout="1")
    try:
        sock = _not_reading(hub, OPENAPI, 30)
        time.sleep(3)  # past the timeout: the hub dropped the answers it could not send
        got = _read_all(sock, within=10)
        sock.close()
        assert got.count(b"HTTP/1.1 200") < 30
        assert httpx.get(hub.url + "/api/health").status_code == 200
    finally:
        assert hub.terminate() == 0, hub.output()
