"""A body larger than 64 KiB is read only for a caller with a valid token.

The hub reads (and checks) every body before a route authenticates its caller. Before
the fix anyone could make it hold a body just under `max_body` (1 MiB) per connection
for `body_timeout` (30 s): 200 anonymous connections took +210 MiB of its memory, a
thousand a gigabyte. Now an unknown caller gets 401 before such a body is read.
"""

from __future__ import annotations

import socket

import httpx
from hubproc import Hub, Tokens

HEAD = (
    "POST /api/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    "{auth}Content-Length: 1000000\r\n\r\n"
)


def _answer_to_head_only(hub: Hub, auth: str, wait: float = 5) -> bytes:
    """What the hub answers to a request head announcing a large body that never comes."""
    with socket.create_connection(("127.0.0.1", hub.port), timeout=wait) as sock:
        sock.sendall(HEAD.format(auth=auth).encode())
        got = b""
        try:
            while chunk := sock.recv(65536):  # the hub closes after its answer
                got += chunk
        except TimeoutError:
            pass  # the hub waits for the body
        return got


def test_unknown_callers_get_401_before_a_large_body_is_read(hub: Hub) -> None:
    for auth in ("", "Authorization: Bearer not-a-token\r\n", "Authorization: Basic eDp4\r\n"):
        answer = _answer_to_head_only(hub, auth)
        assert answer.startswith(b"HTTP/1.1 401"), (auth, answer)
        assert b"needs a valid token" in answer


def test_a_chunked_body_from_an_unknown_caller_stops_at_64_kib(hub: Hub) -> None:
    def chunks() -> object:
        for _ in range(100):
            yield b" " * 4096

    answer = httpx.post(
        hub.url + "/api/jobs",
        content=chunks(),  # type: ignore[arg-type]
        headers={"Content-Type": "application/json"},
    )
    assert answer.status_code == 401, answer.text
    assert "needs a valid token" in answer.json()["error"]


def test_known_callers_still_send_large_bodies(hub: Hub, tokens: Tokens) -> None:
    assert _answer_to_head_only(hub, f"Authorization: Bearer {tokens.produce}\r\n", wait=1) == b""
    command = "true " + "x" * 100_000
    with hub.client(tokens.produce) as client:
        answer = client.post("/api/jobs", json={"type": "shell", "payload": {"command": command}})
    assert answer.status_code == 201, answer.text
    small = httpx.post(hub.url + "/api/jobs", json={"type": "noop"})  # read, then refused
    assert small.status_code == 401
    assert "needs a token" in small.json()["error"]
