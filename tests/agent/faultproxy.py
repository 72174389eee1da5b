"""An HTTP proxy on 127.0.0.1 that injects faults between agents and the hub.

Per request, at the configured rates: `reset` (the connection is reset
before the request reaches the hub), `bad_gateway` (a 502 without
forwarding), `slow` (forwarded after a delay) and `drop_after` (forwarded, the
hub commits, then the connection is reset instead of answering). `drop_next[route]`
drops the next that many answers of one route (its last path segment) the same way.
"""

from __future__ import annotations

import contextlib
import json
import random
import socket
import struct
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # connections this proxy reset on purpose fail later in the handler


class FaultProxy:
    def __init__(
        self,
        target: str,
        *,
        seed: int = 0,
        reset: float = 0.0,
        bad_gateway: float = 0.0,
        slow: float = 0.0,
        drop_after: float = 0.0,
        slow_seconds: tuple[float, float] = (0.05, 0.5),
    ) -> None:
        self.target = target.rstrip("/")
        self.rates = {
            "reset": reset,
            "bad_gateway": bad_gateway,
            "slow": slow,
            "drop_after": drop_after,
        }
        self.slow_seconds = slow_seconds
        self.enabled = True
        self.missing: set[str] = set()  # routes (last path segment) answered 404, as an older hub
        # route -> a body field it answers 400 `unknown field` to, as an older hub's schema
        self.unknown_fields: dict[str, str] = {}
        self.items: Counter[str] = Counter()  # `POST /api/jobs/reports` items by kind
        self.delays: dict[str, float] = {}  # route -> seconds each request waits, then goes on
        self.faults: Counter[str] = Counter()
        self.drop_next: Counter[str] = Counter()  # route -> answers still to drop
        self.requests: Counter[str] = Counter()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._local = threading.local()
        self._clients: list[httpx.Client] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                owner._handle(self)

            do_POST = do_PUT = do_DELETE = do_GET

            def finish(self) -> None:
                with contextlib.suppress(OSError, ValueError):
                    super().finish()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = _QuietServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            clients, self._clients = self._clients, []
        for client in clients:
            client.close()

    def _pick(self) -> tuple[str | None, float]:
        with self._lock:
            if not self.enabled:
                return None, 0.0
            draw = self._rng.random()
            delay = self._rng.uniform(*self.slow_seconds)
        for kind, rate in self.rates.items():
            if draw < rate:
                return kind, delay
            draw -= rate
        return None, 0.0

    def _client(self) -> httpx.Client:
        client: httpx.Client | None = getattr(self._local, "client", None)
        if client is None:
            client = httpx.Client(timeout=60.0)
            self._local.client = client
            with self._lock:
                self._clients.append(client)
        return client

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        route = handler.path.split("?")[0].rsplit("/", 1)[-1]
        with self._lock:
            self.requests[route] += 1
        if route in self.missing:
            return self._answer(
                handler, 404, {"content-type": "application/json"}, b'{"detail":"Not Found"}'
            )
        sent = self._json(body)
        field = self.unknown_fields.get(route)
        if field is not None and isinstance(sent, dict) and field in sent:
            error = json.dumps({"error": f"{field}: unknown field"}).encode()
            return self._answer(handler, 400, {"content-type": "application/json"}, error)
        if route == "reports" and isinstance(sent, dict):
            with self._lock:
                for item in sent.get("reports") or ():
                    if isinstance(item, dict):
                        self.items[str(item.get("kind"))] += 1
        if self.delays.get(route):
            time.sleep(self.delays[route])  # forwarded even if its client died meanwhile
        fault, delay = self._pick()
        with self._lock:
            if self.drop_next[route] > 0:
                self.drop_next[route] -= 1
                fault = "drop_after"
        if fault is not None:
            with self._lock:
                self.faults[fault] += 1
        if fault == "reset":
            return self._reset(handler)
        if fault == "bad_gateway":
            return self._answer(
                handler, 502, {"content-type": "text/plain"}, b"bad gateway (injected)"
            )
        if fault == "slow":
            time.sleep(delay)
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in HOP_BY_HOP}
        try:
            response = self._client().request(
                handler.command, self.target + handler.path, content=body, headers=headers
            )
        except httpx.HTTPError:
            return self._answer(handler, 502, {"content-type": "text/plain"}, b"hub unreachable")
        if fault == "drop_after":
            return self._reset(handler)
        kept = {k: v for k, v in response.headers.items() if k.lower() not in HOP_BY_HOP}
        kept.pop("content-encoding", None)
        self._answer(handler, response.status_code, kept, response.content)

    @staticmethod
    def _json(body: bytes) -> object:
        try:
            return json.loads(body) if body else None
        except ValueError:
            return None

    @staticmethod
    def _answer(
        handler: BaseHTTPRequestHandler, status: int, headers: dict[str, str], body: bytes
    ) -> None:
        handler.send_response(status)
        for key, value in headers.items():
            handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    @staticmethod
    def _reset(handler: BaseHTTPRequestHandler) -> None:
        sock: socket.socket = handler.connection
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
        handler.close_connection = True
