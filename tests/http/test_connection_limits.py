"""Anonymous clients cannot starve a real hub (loopback only, a few dozen sockets).

Before the fix nothing timed out a connection that sent half a request line (or
nothing): ~1000 of them exhausted the hub's file descriptors and its sweep could no
longer open the database; an endless request header grew the hub's memory without
bound (+129 MiB from two connections). Now a request head must be complete within
`head_timeout` (408), a head over `max_header_bytes` is a 431, and over
`max_connections` the oldest connection without a complete request (or an idle one)
makes room, never one holding a long-poll claim or an event stream.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hubproc import Hub, Tokens, make_tokens
from testenv import subprocess_env


def _hub(tmp_path: Path, **settings: str) -> Hub:
    env = subprocess_env(**{f"JOBCORE_HTTP_{k.upper()}": v for k, v in settings.items()})
    return Hub(tmp_path / "jobs.db", env=env)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    server = _hub(
        tmp_path_factory.mktemp("limits"),
        head_timeout="1",
        body_timeout="1",
        max_header_bytes="8KiB",
        max_connections="40",
    )
    yield server
    assert server.terminate() == 0, server.output()


def _connect(hub: Hub) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", hub.port), timeout=10)
    return sock


def _closed_answer(sock: socket.socket, within: float) -> bytes | None:
    """What the hub sent before closing `sock` (b"" if nothing), or None if still open."""
    sock.settimeout(within)
    got = b""
    try:
        while chunk := sock.recv(65536):
            got += chunk
    except TimeoutError:
        return None
    except ConnectionResetError:
        pass
    return got


def test_half_sent_requests_are_closed_within_the_head_timeout(hub: Hub) -> None:
    silent = [_connect(hub) for _ in range(5)]  # connected, sent nothing
    halves = [_connect(hub) for _ in range(15)]
    for sock in halves:
        sock.sendall(b"GET /api/heal")
    kept = _connect(hub)  # one good request, then half of the next on the same connection
    kept.sendall(b"GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n")
    first = b""
    while not first.endswith(b'{"status":"ok"}'):
        first += kept.recv(65536)
    assert first.startswith(b"HTTP/1.1 200"), first
    kept.sendall(b"GET /api/health HTTP/1.1\r\nHost: x\r\n")  # no blank line, ever
    started = time.monotonic()
    for sock in [*silent, *halves, kept]:
        answer = _closed_answer(sock, within=6)
        assert answer is not None, "a connection with an incomplete request stayed open"
        assert answer == b"" or answer.startswith(b"HTTP/1.1 408"), answer
        sock.close()
    assert time.monotonic() - started < 6
    assert httpx.get(hub.url + "/api/health", timeout=5).status_code == 200


def test_a_body_that_never_completes_is_408(hub: Hub) -> None:
    with _connect(hub) as sock:  # no token needed: the body is read before any route runs
        sock.sendall(
            b"POST /api/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"type": '
        )
        answer = _closed_answer(sock, within=6)
    assert answer is not None and answer.startswith(b"HTTP/1.1 408"), answer


def test_an_endless_request_header_is_431(hub: Hub) -> None:
    sock = _connect(hub)
    sock.sendall(b"GET /api/health HTTP/1.1\r\nHost: x\r\nX-Long: ")
    sent = 0
    sock.settimeout(5)
    try:
        while sent < 4 * 1024 * 1024:  # the hub must stop this long before 4 MiB
            sock.sendall(b"a" * 4096)
            sent += 4096
    except (BrokenPipeError, ConnectionResetError):
        pass
    answer = _closed_answer(sock, within=5) or b""
    sock.close()
    assert answer.startswith(b"HTTP/1.1 431"), (sent, answer[:200])
    assert sent < 4 * 1024 * 1024
    # many headers adding up count too
    many = b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 100) for i in range(200))
    answer = httpx.get(hub.url + "/api/health", headers={"x": "1"}, timeout=5)
    assert answer.status_code == 200
    with _connect(hub) as sock:
        sock.sendall(b"GET /api/health HTTP/1.1\r\nHost: x\r\n" + many + b"\r\n")
        assert (_closed_answer(sock, within=5) or b"").startswith(b"HTTP/1.1 431")


def test_anonymous_connections_cannot_take_the_slots_of_long_requests(tmp_path: Path) -> None:
    hub = _hub(tmp_path, head_timeout="30", max_connections="40")
    try:
        tokens: Tokens = make_tokens(hub, hub.db)  # type: ignore[arg-type]
        claimed: dict[str, httpx.Response] = {}

        def long_poll() -> None:
            with hub.client(tokens.agent, timeout=40) as agent:
                claimed["answer"] = agent.post(
                    "/api/jobs/claim",
                    json={"worker_id": "agent-1", "queues": ["slots"], "wait": 25},
                )

        poller = threading.Thread(target=long_poll, daemon=True)
        poller.start()
        time.sleep(0.5)  # the claim is waiting
        flood = []
        for index in range(80):  # twice the bound, none of them completes a request
            sock = _connect(hub)
            if index % 2:
                sock.sendall(b"POST /api/jobs HT")  # half a request line
            else:  # a whole head, then a body that never ends (read before any token)
                sock.sendall(
                    b"POST /api/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 1000\r\n\r\n{"
                )
            flood.append(sock)
        time.sleep(0.5)
        still_open = [sock for sock in flood if _closed_answer(sock, within=0.05) is None]
        assert len(still_open) <= 40, f"{len(still_open)} of 80 unfinished requests kept"
        # a new client still gets in, and the long-poll still gets its job
        with hub.client(tokens.produce, timeout=10) as producer:
            made = producer.post("/api/jobs", json={"type": "noop", "queue": "slots"})
            assert made.status_code == 201, made.text
        poller.join(20)
        assert claimed["answer"].status_code == 200, claimed["answer"].text
        assert claimed["answer"].json()["id"] == made.json()["id"]
        for sock in flood:
            sock.close()
    finally:
        assert hub.terminate() == 0, hub.output()
