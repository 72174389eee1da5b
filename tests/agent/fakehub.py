"""A fake hub on 127.0.0.1 for the agent's tests of what a hub may answer: it registers the
agent with the intervals a test gives, hands out the jobs a test queues, records every request,
and lets a test answer a route its own way (an endless body, a huge one)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from testenv import LocalHTTPServer

# A handler answering a route itself: (handler, parsed body) -> True when it answered.
Answer = Callable[[BaseHTTPRequestHandler, dict[str, Any]], bool]


def job(payload: dict[str, Any], *, type: str = "noop") -> dict[str, Any]:
    """A claimed job as the hub sends it (§8 shape), started by its claim."""
    now = "2026-01-01T00:00:00Z"
    job_id = str(uuid.uuid4())
    return {
        "id": job_id,
        "type": type,
        "queue": "default",
        "payload": payload,
        "status": "claimed",
        "priority": 0,
        "attempts": 1,
        "max_attempts": 3,
        "timeout": 3600.0,
        "lease_id": f"lease-{job_id}",
        "run_at": now,
        "created_at": now,
        "started_at": now,
        "claimed_at": now,
        "meta": {},
        "errors": [],
    }


class FakeHub:
    """`register` is the register answer's body (JSON text, so NaN and -1 can be sent)."""

    def __init__(self, register: str) -> None:
        self.register = register
        self.jobs: list[dict[str, Any]] = []  # handed out by the next claims
        self.requests: Counter[str] = Counter()  # by route; batched reports by item kind
        self.claims: list[dict[str, Any]] = []  # claim bodies
        self.reports: list[dict[str, Any]] = []  # report items (batched or single)
        self.answers: dict[str, list[Answer]] = {}  # route -> its next special answers
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                owner._handle(self, body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = LocalHTTPServer(Handler)
        self._server.server.daemon_threads = True
        self.url = self._server.url

    def close(self) -> None:
        self._server.close()

    def count(self, key: str) -> int:
        with self.lock:
            return self.requests[key]

    def heartbeats(self) -> int:
        """Heartbeats received: batched items and single routes."""
        with self.lock:
            return self.requests["heartbeat"] + self.requests["/heartbeat"]

    def _handle(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        path = handler.path
        route = "/heartbeat" if path.endswith("/heartbeat") else path
        with self.lock:
            items = body.get("reports", []) if path == "/api/jobs/reports" else []
            self.requests[route] += 1
            for item in items:
                self.requests[item.get("kind")] += 1
            self.reports.extend(i for i in items if i.get("kind") != "heartbeat")
            if path == "/api/jobs/claim":
                self.claims.append(body)
            special = self.answers.get(path) or []
            answer = special.pop(0) if special else None
        if answer is not None and answer(handler, body):
            return
        if path == "/api/workers/register":
            return send(handler, 200, self.register.encode())
        if path == "/api/workers/limits":
            return send(handler, 200, b'{"ignored": []}')
        if path == "/api/jobs/claim":
            with self.lock:
                jobs, self.jobs = (
                    self.jobs[: body.get("max_jobs", 1)],
                    self.jobs[body.get("max_jobs", 1) :],
                )
            if jobs:
                return send(handler, 200, json.dumps(jobs).encode())
            wait = body.get("wait")
            time.sleep(min(wait, 1.0) if isinstance(wait, int | float) and wait > 0 else 0)
            return send(handler, 204, b"")
        if path == "/api/jobs/reports":
            results = [{"job_id": i.get("job_id"), "state": "recorded"} for i in items]
            return send(handler, 200, json.dumps({"results": results}).encode())
        if route == "/heartbeat":
            return send(handler, 200, b'{"lease_expires_at": null, "cancel_requested": false}')
        send(handler, 404, b'{"error": "no such route"}')


def send(handler: BaseHTTPRequestHandler, status: int, data: bytes) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    with contextlib.suppress(OSError):  # the agent gave up on it (stopped, killed)
        handler.wfile.write(data)


def endless(total: int, *, declared: bool, sent: list[int]) -> Answer:
    """An answer of `total` bytes of JSON whitespace, with a Content-Length or chunked;
    `sent` gets the bytes written before the agent stopped reading (or all of them)."""

    def answer(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> bool:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        if declared:
            handler.send_header("Content-Length", str(total))
        else:
            handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        chunk = b" " * (1 << 16)
        written = 0
        try:
            while written < total:
                data = chunk[: total - written]
                if declared:
                    handler.wfile.write(data)
                else:
                    handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                written += len(data)
            if not declared:
                handler.wfile.write(b"0\r\n\r\n")
        except OSError:  # the agent closed the connection
            pass
        sent.append(written)
        handler.close_connection = True
        return True

    return answer


def raw(data: bytes) -> Answer:
    """A 200 answer with exactly this body."""

    def answer(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> bool:
        send(handler, 200, data)
        return True

    return answer
