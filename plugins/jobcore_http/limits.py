"""`BodyLimit`: requests whose body exceeds `max_body` get 413 before any route reads them,
and JSON bodies that Python's parser accepts but JSON does not get 400 before any route runs.

Python's `json.loads` turns `NaN`, `Infinity` and numbers too large for a float into
floats that are stored as `null` (the job silently loses data), and `"\\ud800"` escapes
into lone surrogates that cannot be encoded in any answer: a job holding one was
written and then its enqueue answered 400, and every claim or listing that met it
failed afterwards (its jobs claimed for nobody until their lease expired).
Uploads to `/api/artifacts` stream under their own limit (`artifact_max_bytes`).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyLimit:
    def __init__(self, app: ASGIApp, max_body: int) -> None:
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"].startswith(_OWN_LIMIT):
            await self.app(scope, receive, send)
            return
        length = None
        chunked = False
        json_body = scope["method"] in ("POST", "PUT", "PATCH")
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    await self._reject(send, 400, "Content-Length is not a number")
                    return
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
            elif name == b"content-type":
                json_body = json_body and _is_json(value)
        if length is not None and length > self.max_body:
            await self._reject(send, 413, self._too_large(length))
            return
        if not chunked and not json_body:
            await self.app(scope, receive, send)
            return
        # read the body here, bounded, check it, then replay it
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                await self._reject(send, 413, self._too_large(size, at_least=True))
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        problem = _not_json(body) if json_body else None
        if problem is not None:
            await self._reject(send, 400, problem, close=False)
            return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

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
# only bodies holding one of these can parse into what JSON cannot carry
_SUSPECT = re.compile(rb"NaN|Infinity|\\u[dD][89a-fA-F]|[0-9][eE]|[0-9.]{300}")


def _is_json(content_type: bytes) -> bool:
    kind = content_type.split(b";", 1)[0].strip().lower()
    return kind == b"application/json" or kind.endswith(b"+json")


def _no_constant(name: str) -> Any:
    raise _Refused(f"{name} is not JSON; send a number or null")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"the number {text[:40]} is too large for a float")
    return value


class _Refused(ValueError):
    pass


def _not_json(body: bytes) -> str | None:
    """Why `body` holds what JSON cannot carry (NaN, Infinity, overflowing numbers, lone
    surrogates), or None. Bodies that do not parse at all are left to the route (400)."""
    if not body or _SUSPECT.search(body) is None:
        return None
    try:
        value = json.loads(body, parse_constant=_no_constant, parse_float=_finite)
    except _Refused as exc:
        return f"body is not valid JSON ({exc})"
    except (ValueError, RecursionError):
        return None
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return (
            "body is not valid JSON (it holds a lone surrogate \\uD800-\\uDFFF); send valid UTF-8"
        )
    except (ValueError, RecursionError):
        return None
    return None
