"""`BodyLimit`: requests whose body exceeds `max_body` get 413 before any route reads them."""

from __future__ import annotations

import json
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
        if not chunked:
            await self.app(scope, receive, send)
            return
        # a body of unknown size: read it here, bounded, then replay it
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
    async def _reject(send: Send, status: int, message: str) -> None:
        body = json.dumps({"error": message}).encode()
        headers: list[Any] = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
