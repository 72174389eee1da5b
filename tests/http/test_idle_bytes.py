"""Two kinds of connection that nothing timed out after an answer.

- CRLFs between requests: the parser skips them without beginning a request, and uvicorn
  stops its keep-alive timer on any byte, so a client sending `\\r\\n` now and then held
  its connection for ever (and it was never "waiting for a head", so never evicted first).
  Now such bytes start a head's time (`head_timeout`).
- A request answered before its body came (an anonymous upload to `/api/artifacts`, 401
  before its body is read) kept its connection open while the rest was dribbled. Now the
  connection ends with the answer.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hubproc import Hub
from testenv import subprocess_env


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    env = subprocess_env(JOBCORE_HTTP_HEAD_TIMEOUT="1", JOBCORE_HTTP_BODY_TIMEOUT="2")
    server = Hub(Path(tmp_path_factory.mktemp("idle")) / "jobs.db", env=env)
    yield server
    assert server.terminate() == 0, server.output()


def _held(sock: socket.socket, drip: bytes, seconds: float) -> tuple[float | None, bytes]:
    """Send `drip` every 0.3 s for `seconds`: (when the hub closed, what it sent)."""
    sock.settimeout(0.1)
    started = time.monotonic()
    got = b""
    while time.monotonic() - started < seconds:
        try:
            sock.sendall(drip)
        except OSError:
            return time.monotonic() - started, got
        end = time.monotonic() + 0.3
        while time.monotonic() < end:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return time.monotonic() - started, got
            if not chunk:
                return time.monotonic() - started, got
            got += chunk
    return None, got


def test_crlfs_between_requests_do_not_hold_a_connection(hub: Hub) -> None:
    with socket.create_connection(("127.0.0.1", hub.port), timeout=5) as sock:
        sock.sendall(b"GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n")
        closed, got = _held(sock, b"\r\n", 8)
    assert got.startswith(b"HTTP/1.1 200"), got
    assert closed is not None and closed < 4, (closed, got)  # head_timeout 1 s (+ slack)
    assert b"408 Request Timeout" in got


def test_a_request_answered_before_its_body_ends_its_connection(hub: Hub) -> None:
    with socket.create_connection(("127.0.0.1", hub.port), timeout=5) as sock:
        sock.sendall(
            b"POST /api/artifacts HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n"
        )
        closed, got = _held(sock, b"a" * 100, 6)
    assert got.startswith(b"HTTP/1.1 401"), got
    assert closed is not None and closed < 3, (closed, got)


def _answer(sock: socket.socket) -> bytes:
    """One whole answer (head, then a body of its Content-Length), however it is split."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, data
        body += chunk
    assert len(body) == length, (head, body)  # nothing of a next answer was read
    return head


def test_a_keep_alive_request_after_an_answer_is_still_served(hub: Hub) -> None:
    with socket.create_connection(("127.0.0.1", hub.port), timeout=5) as sock:
        request = b"GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n"
        sock.sendall(request)
        assert _answer(sock).startswith(b"HTTP/1.1 200")
        sock.sendall(b"\r\n" + request)  # a CRLF before the next request is allowed
        assert _answer(sock).startswith(b"HTTP/1.1 200")
