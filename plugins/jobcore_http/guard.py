"""The hub's HTTP protocol: uvicorn's httptools protocol with bounds on what any client,
with or without a token, can hold.

uvicorn times out only idle keep-alive connections: a connection that sends half a
request line (or nothing) is never closed, and httptools buffers a header of any
length. So, per connection:

- the request head (request line and headers) must be complete within `head_timeout`
  seconds of the connection being made, and of the first byte of each later request;
  otherwise the hub answers 408 and closes it;
- a head larger than `max_header_bytes` is answered 431 and the connection closed;
- at most `max_connections` connections are open. When a new one would pass that, the
  oldest connection that has not yet sent a complete request head, else the oldest
  idle keep-alive connection, else the oldest still sending a body, is closed to make
  room; only when every connection has sent its whole request and waits for the
  answer (a long-poll claim, an event stream, a report) is the new connection refused
  with 503. A client that authenticated and holds a long request
  is never evicted by clients that have not even sent a request;
- at most `MAX_PIPELINE` requests wait behind the one being answered: uvicorn parses every
  pipelined request it has read and reads on after each answer, so a client that sends
  requests faster than it takes the answers grew the hub's memory without bound. More
  than that: the ones queued are answered and the connection closed. Nothing more is read
  while requests wait;
- an answer the client does not take (its socket stays full) for `write_timeout`
  seconds closes the connection: such a connection was never idle, so it could not be
  evicted, and a thousand of them (anonymous, asking for `/openapi.json` and never
  reading) cut every other client off. Such a connection is evicted like an idle one;
- bytes that begin no request between two requests (the parser skips CRLFs without
  beginning one, and uvicorn stops its keep-alive timer on any byte) start a head's time
  as the first byte of a request does; a request answered before its body came (a 401 to
  an upload, which reads its own body) ends its connection, which the rest of the body
  held for as long as the client took to dribble it;
- an event stream (`EVENT_PATHS`) being answered is closed to make room when no other
  kind is left, oldest first: its client resumes with `Last-Event-ID`. Long-poll claims
  and other requests being answered are never closed for a new connection. (Streams per
  caller are bounded by the events route, `max_streams_per_token`.)

Each request's ASGI scope holds its connection under `CONNECTION`: a route may end it
(`drop_if_stalled`).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class Limits:
    """The bounds of one server (numbers from `HttpSettings`)."""

    def __init__(
        self,
        max_connections: int,
        head_timeout: float,
        max_header_bytes: int,
        write_timeout: float = 30.0,
    ) -> None:
        self.max_connections = max_connections
        self.head_timeout = head_timeout
        self.max_header_bytes = max_header_bytes
        self.write_timeout = write_timeout


MAX_PIPELINE = 32  # requests read ahead of the one being answered, per connection
EVENT_PATHS = ("/api/events", "/api/jobs/events")  # streams: evicted last, never refused for
CONNECTION = "jobcore.connection"  # the scope key of a request's connection (`_Guarded`)


def _answer(status: str, message: str) -> bytes:
    body = ('{"error": "' + message + '"}').encode()
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode() + body


_MALFORMED = (
    "the request is not valid HTTP/1.1 (a malformed request line or header, a control "
    "character in a header value, or conflicting Content-Length and Transfer-Encoding)"
)


def guarded_protocol(limits: Limits) -> type[HttpToolsProtocol]:
    """An `HttpToolsProtocol` class enforcing `limits` (pass as uvicorn's `http=`)."""

    class GuardedProtocol(_Guarded):
        LIMITS = limits

    return GuardedProtocol


class _HeadTooLarge(Exception):
    pass


class _TooManyPipelined(Exception):
    pass


class _Guarded(HttpToolsProtocol):
    LIMITS: Limits

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        self._in_head = True  # no complete request head yet on this request
        self._head_bytes = 0  # bytes of chunks that were all head (an unfinished head)
        self._head_parsed = 0  # request line and headers the parser handed over
        self._too_large = False
        self._head_count = 0  # messages begun: a chunk that starts one is not all head
        self._since = time.monotonic()  # when the current head (or idle wait) began
        self._write_timer: asyncio.TimerHandle | None = None  # armed while writing is paused
        self._pipelined_over = False  # more than MAX_PIPELINE requests waited

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._since = time.monotonic()
        self._arm()
        if len(self.connections) > self.LIMITS.max_connections and not self._make_room():
            transport.write(
                _answer("503 Service Unavailable", "the hub is at its connection limit")
            )
            transport.close()

    def _make_room(self) -> bool:
        """Close the oldest connection without a complete request head, else the oldest
        idle one, else the oldest still sending its body (never this one, never one whose
        request is complete and being answered); False if none."""
        waiting: list[_Guarded] = []
        idle: list[_Guarded] = []  # idle keep-alive, or not taking its answer
        receiving: list[_Guarded] = []
        streams: list[_Guarded] = []  # event streams: they resume with Last-Event-ID
        for other in self.connections:
            if other is self or not isinstance(other, _Guarded) or other.transport.is_closing():
                continue
            if other._in_head:
                waiting.append(other)
            elif other.cycle is None or other.cycle.response_complete or other.flow.write_paused:
                idle.append(other)
            elif other.cycle.more_body:
                receiving.append(other)  # its body is still coming (read before any token)
            elif other.cycle.scope.get("path") in EVENT_PATHS and other.cycle.response_started:
                streams.append(other)
        victims = waiting or idle or receiving or streams
        if not victims:
            return False
        oldest = min(victims, key=lambda other: other._since)
        if oldest.flow.write_paused:
            oldest.transport.abort()  # close() would wait for a client that does not read
        else:
            oldest.transport.close()
        return True

    def drop_if_stalled(self) -> None:
        """Close the connection now if its client is not taking what was sent (a route's
        own end of the answer would wait behind it)."""
        if self.flow.write_paused and not self.transport.is_closing():
            self.transport.abort()

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(self.LIMITS.head_timeout, self._head_timed_out)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._in_head and not self.transport.is_closing():
            seconds = f"{self.LIMITS.head_timeout:g}"
            self.transport.write(
                _answer("408 Request Timeout", f"request head not complete within {seconds} s")
            )
            self.transport.close()

    def _refuse_head(self) -> None:
        limit = self.LIMITS.max_header_bytes
        self.transport.write(
            _answer(
                "431 Request Header Fields Too Large",
                f"request head over the hub's limit of {limit} bytes",
            )
        )
        self.transport.close()
        self._disarm()

    def eof_received(self) -> None:
        """The client ended its side (EOF): mark the request disconnected now.

        uvicorn learns of it one event-loop turn later and drops an answer sent in
        between without a trace; a stopping agent half-closes its claim long-poll, so
        the claim route must see it at once to give back jobs claimed for it.
        """
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True
            cycle.message_event.set()

    def data_received(self, data: bytes) -> None:
        if self._pipelined_over:
            self.flow.pause_reading()  # the parser stopped: the connection ends after its answers
            return
        in_head, begun = self._in_head, self._head_count
        super().data_received(data)
        if (
            not self._in_head
            and begun == self._head_count
            and (self.cycle is None or self.cycle.response_complete)
            and not self.pipeline
            and not self.transport.is_closing()
        ):
            # bytes between requests that begin none (the parser skips CRLFs): uvicorn
            # stopped its keep-alive timer on them, so they start a head's time
            self._in_head = True
            self._since = time.monotonic()
            self._arm()
            return
        if self._in_head and in_head and begun == self._head_count:
            self._head_bytes += len(data)  # the whole chunk was part of one unfinished head
            if self._head_bytes > self.LIMITS.max_header_bytes and not self.transport.is_closing():
                self._refuse_head()

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._write_timer is None:
            self._write_timer = self.loop.call_later(
                self.LIMITS.write_timeout, self._write_timed_out
            )

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def _write_timed_out(self) -> None:
        self._write_timer = None
        self.transport.abort()  # its answers cannot be delivered: drop them

    def send_400_response(self, msg: str) -> None:
        if self._pipelined_over:
            self.flow.pause_reading()
            return
        if self._too_large:  # on_headers_complete refused the head (the parser says 400)
            if not self.transport.is_closing():
                self._refuse_head()
            return
        # uvicorn answers text/plain; every error of the hub is `{"error": ...}`
        self._disarm()
        if not self.transport.is_closing():
            self.transport.write(_answer("400 Bad Request", _MALFORMED))
            self.transport.close()

    def on_url(self, url: bytes) -> None:
        self._head_parsed += len(url)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_parsed += len(name) + len(value) + 4
        super().on_header(name, value)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if not self._in_head:  # a later request on this connection: its first byte
            self._in_head = True
            self._since = time.monotonic()
            self._arm()
        self._head_bytes = self._head_parsed = 0
        self._head_count += 1

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._disarm()
        if self._head_parsed > self.LIMITS.max_header_bytes:
            self._too_large = True
            raise _HeadTooLarge  # stops the parser; uvicorn answers through send_400_response
        if len(self.pipeline) >= MAX_PIPELINE:
            # answer the requests already queued, then close; read nothing more
            self._pipelined_over = True
            self.cycle.keep_alive = False
            raise _TooManyPipelined  # stops the parser (uvicorn calls send_400_response)
        self.scope[CONNECTION] = self  # type: ignore[literal-required]
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        unread = self.cycle is not None and self.cycle.more_body
        super().on_response_complete()
        if unread and not self.transport.is_closing():
            # answered before its body came (a 401 to an upload): the rest of the body would
            # hold the connection for as long as the client dribbles it
            self.transport.close()
            return
        if self.pipeline or self._pipelined_over:  # uvicorn reads on after each answer:
            self.flow.pause_reading()  # not while requests wait
        self._since = time.monotonic()  # idle from now (uvicorn's keep-alive timeout runs)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None
        super().connection_lost(exc)
