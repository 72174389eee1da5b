"""`BodyLimit`: requests whose body exceeds `max_body` get 413 before any route reads them,
and JSON bodies that Python's parser accepts but JSON does not get 400 before any route runs.

Python's `json.loads` turns `NaN`, `Infinity` and numbers too large for a float into
floats that are stored as `null` (the job silently loses data), and `"\\ud800"` escapes
into lone surrogates that cannot be encoded in any answer: a job holding one was
written and then its enqueue answered 400, and every claim or listing that met it
failed afterwards (its jobs claimed for nobody until their lease expired). The raw
bytes `ED A0 80` (an encoded surrogate) parse the same way, so the check is made on the
parsed value, whatever the body's encoding or content type. A URL holding a NUL character
(`%00`: no id, filter or name may hold one, and PostgreSQL text cannot) is a 400 too.
Uploads to `/api/artifacts` stream under their own limit (`artifact_max_bytes`).

A body is read before any route authenticates its caller, so a body larger than
`ANONYMOUS_BODY` is read only for a caller that `may_send` names as known (a valid token):
others get 401 before it is read. Without that, a thousand anonymous connections each
holding a body just under `max_body` kept a gigabyte of the hub's memory.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobcore_http.responses import readable

ANONYMOUS_BODY = 64 * 1024  # the largest body read before the caller is known


class BodyLimit:
    def __init__(
        self,
        app: ASGIApp,
        max_body: int,
        body_timeout: float = 30.0,
        may_send: Callable[[Scope], bool] | None = None,
    ) -> None:
        self.app = app
        self.max_body = max_body
        self.body_timeout = body_timeout
        self.may_send = may_send  # None: anyone may send up to max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        problem = _bad_url(scope)
        if problem is not None:
            await self._reject(send, 400, problem)
            return
        if scope["path"].startswith(_OWN_LIMIT):
            await self.app(scope, receive, send)
            return
        length = None
        chunked = False
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    await self._reject(send, 400, "Content-Length is not a number")
                    return
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
        if length is not None and length > self.max_body:
            await self._reject(send, 413, self._too_large(length))
            return
        if length is not None and length > ANONYMOUS_BODY and not self._known(scope):
            await self._reject(send, 401, _UNKNOWN)
            return
        if not chunked and not length:
            await self.app(scope, receive, send)
            return
        # read the body here, bounded in size and time, check it, then replay it
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.body_timeout):
                while True:
                    message = await receive()
                    if message["type"] != "http.request":
                        return  # the client went away mid-body: nothing to answer or run
                    chunk = message.get("body", b"")
                    before, size = size, size + len(chunk)
                    if before <= ANONYMOUS_BODY < size and not self._known(scope):
                        await self._reject(send, 401, _UNKNOWN)
                        return
                    if size > self.max_body:
                        await self._reject(send, 413, self._too_large(size, at_least=True))
                        return
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            seconds = f"{self.body_timeout:g}"
            await self._reject(send, 408, f"request body not complete within {seconds} s")
            return
        body = b"".join(chunks)
        # whatever its content type says (a route may parse it as JSON), a body that parses
        # as JSON is checked on its parsed value
        problem, parsed = _not_json(body)
        if problem is not None:
            await self._reject(send, 400, problem, close=False)
            return
        if parsed is not _UNPARSED:
            scope[PARSED_BODY] = parsed  # the hot lane reads it instead of parsing again
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _known(self, scope: Scope) -> bool:
        return self.may_send is None or self.may_send(scope)

    def _too_large(self, size: int, *, at_least: bool = False) -> str:
        more = "more than " if at_least else ""
        return (
            f"request body is {more}{size} bytes, over the hub's limit of {self.max_body} "
            "(serve --max-body)"
        )

    @staticmethod
    async def _reject(send: Send, status: int, message: str, *, close: bool = True) -> None:
        body = json.dumps({"error": message}).encode()
        headers: list[Any] = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        if close:
            headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


_OWN_LIMIT = "/api/artifacts"
_UNKNOWN = (
    f"a request body over {ANONYMOUS_BODY // 1024} KiB needs a valid token "
    "(Authorization: Bearer TOKEN)"
)


def _bad_url(scope: Scope) -> str | None:
    """Why the request's path or query holds a NUL character (no text field may), or None."""
    if "\x00" in scope["path"]:
        return "the URL path holds a NUL character (%00); ids and names cannot contain NUL"
    query = scope.get("query_string", b"")
    if query:
        # as Starlette parses it for the routes
        for key, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
            if "\x00" in key or "\x00" in value:
                return (
                    f"query parameter {readable(key)[:40]!r} holds a NUL character (%00); "
                    "text fields cannot contain NUL"
                )
    return None


def _no_constant(name: str) -> Any:
    raise _Refused(f"{name} is not JSON; send a number or null")


class _Refused(ValueError):
    pass


def surrogate_path(value: Any, path: str = "") -> str | None:
    """Where the first string (or object key) holding a lone surrogate sits in a parsed JSON
    value (`a.b[2]`, `(the value itself)`), or None."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path or "(the value itself)"
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{readable(key)}" if path else readable(key)
            if surrogate_path(key) is not None:
                return f"{where} (a key)"
            found = surrogate_path(item, where)
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = surrogate_path(item, f"{path}[{index}]")
            if found is not None:
                return found
    return None


PARSED_BODY = "jobcore.parsed_body"
"""Scope key: the request body as `json.loads` parsed it (set when it parsed and passed)."""

_UNPARSED = object()


def _not_json(body: bytes) -> tuple[str | None, Any]:
    """Why `body`, parsed as the routes parse it (`json.loads` of the bytes: UTF-8, -16 or
    -32, encoded surrogates passed through), holds what JSON cannot carry (NaN, Infinity,
    overflowing numbers, lone surrogates in any string or key), or None; and the parsed
    value when it passed (`_UNPARSED` otherwise). Bodies that do not parse at all are left
    to the route (400 for a JSON route)."""
    if not body:
        return None, _UNPARSED
    try:
        value = json.loads(body, parse_constant=_no_constant)
    except _Refused as exc:
        return f"body is not valid JSON ({exc})", _UNPARSED
    except (ValueError, RecursionError):
        return None, _UNPARSED
    problem = _not_carried(value)
    return problem, value if problem is None else _UNPARSED


def _not_carried(value: Any) -> str | None:
    """Why a parsed value holds what JSON cannot carry (lone surrogates, overflowed floats,
    nesting too deep to check), or None."""
    try:
        json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except UnicodeEncodeError:
        where = surrogate_path(value)
        return (
            f"body is not valid JSON: {where or 'a string'} holds a lone surrogate "
            "(U+D800-U+DFFF, as an escape or as encoded bytes); send valid UTF-8"
        )
    except ValueError:  # a float overflowed to infinity
        return "body is not valid JSON (a number is too large for a float)"
    except RecursionError:
        return "body is not valid JSON (nested too deeply to check)"
    return None
