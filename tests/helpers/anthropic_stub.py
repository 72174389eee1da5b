"""A local stub of the Anthropic Messages API over real HTTP on 127.0.0.1.

Answers `POST /v1/messages` with plain JSON or, when the request asks for
`"stream": true`, the server-sent-event format. Tests script failures with
`fail_next(status, retry_after=...)`; every request is recorded. `hold()`
makes message answers wait (a slow API; a stream sends `ping` events meanwhile)
until `release()` or the stub stops;
`answered` counts the message answers sent (or refused by a client that hung up).

Hostile answers, one per `*_next` call: `huge_next` (an answer of any size,
written a piece at a time), `error_body_next` (a huge error page),
`stream_error_next` (`event: error` after a 200), `cut_next` (a stream cut
before `message_stop`), `reply_next(stop_reason=…)`, `echo_key_next` (an error
quoting the request's credentials) and `gzip_next` (a compressed answer);
`sent` is how many body bytes the last of them got out before the client hung up.
"""

from __future__ import annotations

import gzip
import itertools
import json
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


PIECE = 1 << 20  # bytes of a huge answer written at a time (never held whole)


@dataclass
class Scripted:
    status: int
    retry_after: str | None = None
    text: str | None = None
    raw: bytes | None = None  # sent as it is, as application/json
    stop_reason: str = "end_turn"
    hostile: str | None = None  # huge, error_body, stream_error, cut, echo_key, gzip
    size: int = 0  # bytes of text (huge, gzip) or of the body (error_body)
    length: bool = True  # huge: send a content-length (else the body ends with the connection)
    error_type: str = ""  # stream_error
    chunked: bool = False  # cut: a chunked body cut inside a chunk


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class StubState:
    script: deque[Scripted] = field(default_factory=deque)
    requests: list[Recorded] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    reply: str = "EXTRACTED: {prompt}"
    held: bool = False
    released: threading.Event = field(default_factory=threading.Event)
    answered: int = 0
    sent: int = 0  # body bytes of the last hostile answer the client took


def prompt_of(body: dict[str, Any]) -> str:
    users = [m for m in body.get("messages") or [] if m.get("role") == "user"] or [{}]
    content = users[-1].get("content", "")
    if isinstance(content, list):  # Claude Code sends reminders first, the prompt last
        texts = [
            part.get("text", "")
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        ]
        return texts[-1] if texts else ""
    return str(content)


class Handler(BaseHTTPRequestHandler):
    server: StubServer  # type: ignore[assignment]
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(
        self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.send_header("request-id", "req_stub")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def do_HEAD(self) -> None:
        self._send(200, b"", "text/plain")

    def do_GET(self) -> None:
        self._send(
            404,
            json.dumps(
                {"type": "error", "error": {"type": "not_found_error", "message": self.path}}
            ).encode(),
            "application/json",
        )

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b"{}"
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            body = {}
        state = self.server.state
        with state.lock:
            state.requests.append(
                Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            )
            scripted = (
                state.script.popleft()
                if state.script
                and self.path.startswith("/v1/messages")
                and "count_tokens" not in self.path
                else None
            )
        if "count_tokens" in self.path:
            self._send(200, json.dumps({"input_tokens": 10}).encode(), "application/json")
            return
        if not self.path.startswith("/v1/messages"):
            self.do_GET()
            return
        if state.held and body.get("stream"):
            self._trickle(state)
            return
        if state.held:
            state.released.wait()
        if scripted is not None and scripted.hostile is not None:
            try:
                Hostile(self, scripted, body).send()
            except OSError:
                pass  # the client hung up: what `sent` counts is what it took
            finally:
                with state.lock:
                    state.answered += 1
            return
        if scripted is not None and scripted.raw is not None:
            self._send(scripted.status, scripted.raw, "application/json")
            return
        if scripted is not None and scripted.status != 200:
            error = {
                "type": "error",
                "error": {
                    "type": ERROR_TYPES.get(scripted.status, "api_error"),
                    "message": f"stub says {scripted.status}",
                },
            }
            headers = {"retry-after": scripted.retry_after} if scripted.retry_after else {}
            self._send(scripted.status, json.dumps(error).encode(), "application/json", headers)
            return
        text = (
            scripted.text
            if scripted is not None and scripted.text is not None
            else state.reply.format(prompt=prompt_of(body))
        )
        model = body.get("model", "claude-stub")
        message = {
            "id": "msg_stub",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": scripted.stop_reason if scripted is not None else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": max(1, len(text) // 4)},
        }
        try:
            if body.get("stream"):
                self._send(200, self._sse(message, text), "text/event-stream")
            else:
                self._send(200, json.dumps(message).encode(), "application/json")
        except OSError:
            pass  # the client hung up (a caller that gave up on a held answer)
        finally:
            with state.lock:
                state.answered += 1

    def _trickle(self, state: StubState) -> None:
        """A held stream: `ping` events every 0.2s until released, then the answer."""
        self.close_connection = True
        try:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("connection", "close")
            self.end_headers()
            while not state.released.wait(0.2):
                self.wfile.write(b'event: ping\ndata: {"type": "ping"}\n\n')
                self.wfile.flush()
            message = {
                "id": "msg_stub",
                "type": "message",
                "role": "assistant",
                "model": "claude-stub",
                "content": [{"type": "text", "text": "late"}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 10, "output_tokens": 1},
            }
            self.wfile.write(self._sse(message, "late"))
        except OSError:
            pass  # the client hung up
        finally:
            with state.lock:
                state.answered += 1

    @staticmethod
    def _sse(message: dict[str, Any], text: str) -> bytes:
        start = {
            **message,
            "content": [],
            "stop_reason": None,
            "usage": {"input_tokens": 10, "output_tokens": 1},
        }
        half = len(text) // 2
        events = [
            ("message_start", {"type": "message_start", "message": start}),
            (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
            ),
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": text[:half]},
                },
            ),
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": text[half:]},
                },
            ),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                    "usage": {"output_tokens": message["usage"]["output_tokens"]},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
        return "".join(
            f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events
        ).encode()


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def _message(text: str, stop_reason: str | None = "end_turn") -> dict[str, Any]:
    return {
        "id": "msg_stub",
        "type": "message",
        "role": "assistant",
        "model": "claude-stub",
        "content": [{"type": "text", "text": text}],
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1},
    }


_START = _event(
    "message_start",
    {"type": "message_start", "message": {**_message(""), "content": [], "stop_reason": None}},
)
_BLOCK = _event(
    "content_block_start",
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
)


def _delta(text: str) -> bytes:
    data = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": text},
    }
    return _event("content_block_delta", data)


_END = (
    _event("content_block_stop", {"type": "content_block_stop", "index": 0})
    + _event(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 1},
        },
    )
    + _event("message_stop", {"type": "message_stop"})
)


def _pieces(size: int, byte: bytes = b"A") -> Iterator[bytes]:
    while size > 0:
        yield byte * min(PIECE, size)
        size -= PIECE


class Hostile:
    """One hostile answer (see `Scripted.hostile`), written a piece at a time."""

    def __init__(self, handler: Handler, scripted: Scripted, body: dict[str, Any]) -> None:
        self.handler, self.scripted, self.body = handler, scripted, body
        self.state = handler.server.state
        with self.state.lock:
            self.state.sent = 0

    def send(self) -> None:
        getattr(self, self.scripted.hostile or "")()

    def _head(self, status: int, content_type: str, **headers: str) -> None:
        handler = self.handler
        handler.send_response(status)
        handler.send_header("content-type", content_type)
        for key, value in headers.items():
            handler.send_header(key.replace("_", "-"), value)
        if "content_length" not in headers:
            handler.close_connection = True  # the body ends with the connection
            handler.send_header("connection", "close")
        handler.end_headers()

    def _write(self, pieces: Iterable[bytes]) -> None:
        for piece in pieces:
            self.handler.wfile.write(piece)
            with self.state.lock:
                self.state.sent += len(piece)
        self.handler.wfile.flush()

    def huge(self) -> None:
        """A complete answer whose text is `size` bytes."""
        size = self.scripted.size
        if self.body.get("stream"):
            self._head(200, "text/event-stream")
            step = PIECE // 2
            deltas = (_delta("A" * min(step, size - at)) for at in range(0, size, step))
            self._write(itertools.chain([_START + _BLOCK], deltas, [_END]))
            return
        before, after = json.dumps(_message("@@")).encode().split(b"@@")
        length = {"content_length": str(len(before) + size + len(after))}
        self._head(200, "application/json", **(length if self.scripted.length else {}))
        self._write(itertools.chain([before], _pieces(size), [after]))

    def error_body(self) -> None:
        """An error whose body is `size` bytes of a proxy's HTML page."""
        status, size = self.scripted.status, self.scripted.size
        self._head(status, "text/html", content_length=str(size))
        self._write(_pieces(size, b"E"))

    def stream_error(self) -> None:
        """A 200 stream that starts, then sends `event: error` of `error_type`."""
        error = {"type": self.scripted.error_type, "message": f"stub {self.scripted.error_type}"}
        self._head(200, "text/event-stream")
        self._write(
            [
                _START,
                _BLOCK,
                _delta("REQ-1: half"),
                _event("error", {"type": "error", "error": error}),
            ]
        )

    def cut(self) -> None:
        """A stream whose connection closes before `message_stop` (a proxy's idle timeout)."""
        data = _START + _BLOCK + _delta("REQ-1: the first half of the answ")
        if not self.scripted.chunked:
            self._head(200, "text/event-stream")
            self._write([data])
            return
        self._head(200, "text/event-stream", transfer_encoding="chunked")
        self._write([b"%x\r\n" % (len(data) + 100) + data])  # 100 bytes of the chunk never come

    def echo_key(self) -> None:
        """An error whose message quotes the credentials the request came with."""
        headers = self.handler.headers
        quoted = headers.get("x-api-key") or headers.get("authorization") or ""
        bare = quoted.removeprefix("Bearer ")
        message = (
            f"invalid credentials: {quoted}; key {bare} unknown "
            "(Authorization: Bearer gw-token-42) " + "x" * 5000
        )
        error = json.dumps(
            {"type": "error", "error": {"type": "authentication_error", "message": message}}
        ).encode()
        self._head(self.scripted.status, "application/json", content_length=str(len(error)))
        self._write([error])

    def gzip(self) -> None:
        """A complete answer of `size` bytes of text, gzip-compressed (a few KiB on the wire)."""
        before, after = json.dumps(_message("@@")).encode().split(b"@@")
        packed = gzip.compress(before + b"A" * self.scripted.size + after, compresslevel=9)
        self._head(
            200, "application/json", content_encoding="gzip", content_length=str(len(packed))
        )
        self._write([packed])


class StubServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.state = StubState()
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> StubServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.release()
        self.shutdown()
        self.server_close()

    def fail_next(self, status: int, retry_after: str | None = None, times: int = 1) -> None:
        with self.state.lock:
            self.state.script.extend(Scripted(status, retry_after) for _ in range(times))

    def reply_next(self, text: str, stop_reason: str = "end_turn") -> None:
        with self.state.lock:
            self.state.script.append(Scripted(200, text=text, stop_reason=stop_reason))

    def _hostile_next(self, scripted: Scripted) -> None:
        with self.state.lock:
            self.state.script.append(scripted)

    def huge_next(self, size: int, *, length: bool = True) -> None:
        """The next answer's text is `size` bytes (JSON with or without a content-length, or
        a stream, as asked); it is written a piece at a time."""
        self._hostile_next(Scripted(200, hostile="huge", size=size, length=length))

    def error_body_next(self, status: int, size: int) -> None:
        """The next answer is `status` with a `size`-byte HTML page (a proxy's)."""
        self._hostile_next(Scripted(status, hostile="error_body", size=size))

    def stream_error_next(self, error_type: str) -> None:
        """The next (streamed) answer starts, then an `event: error` of `error_type` comes."""
        self._hostile_next(Scripted(200, hostile="stream_error", error_type=error_type))

    def cut_next(self, *, chunked: bool = False) -> None:
        """The next (streamed) answer's connection closes before `message_stop`."""
        self._hostile_next(Scripted(200, hostile="cut", chunked=chunked))

    def echo_key_next(self, status: int = 401) -> None:
        """The next answer is an error quoting the request's credentials (a gateway's)."""
        self._hostile_next(Scripted(status, hostile="echo_key"))

    def gzip_next(self, size: int) -> None:
        """The next answer is gzip-compressed JSON holding `size` bytes of text."""
        self._hostile_next(Scripted(200, hostile="gzip", size=size))

    @property
    def sent(self) -> int:
        with self.state.lock:
            return self.state.sent

    def raw_next(self, body: bytes, status: int = 200) -> None:
        """The next message request is answered with `body` as it is (malformed answers)."""
        with self.state.lock:
            self.state.script.append(Scripted(status, raw=body))

    def hold(self) -> None:
        """From now on, message requests wait for `release()` before they are answered."""
        self.state.released.clear()
        self.state.held = True

    def release(self) -> None:
        self.state.held = False
        self.state.released.set()

    @property
    def answered(self) -> int:
        with self.state.lock:
            return self.state.answered

    @property
    def requests(self) -> list[Recorded]:
        with self.state.lock:
            return list(self.state.requests)

    def message_requests(self) -> list[Recorded]:
        return [
            r
            for r in self.requests
            if r.path.startswith("/v1/messages") and "count_tokens" not in r.path
        ]


if __name__ == "__main__":  # manual use: python anthropic_stub.py
    server = StubServer()
    print(server.base_url, flush=True)
    server.serve_forever()
