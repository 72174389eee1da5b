"""uvicorn's HTTP protocol (httptools), told at once when a client ends its side.

uvicorn closes the connection when the client half-closes it (EOF), but the
request learns of it only one event-loop turn later; an answer sent in between
is dropped without a trace. A stopping agent half-closes its claim long-poll,
so jobs claimed for it in that turn would stay claimed until their lease ran
out. Here the request is marked disconnected as the EOF arrives: the claim
route then gives those jobs back instead of sending them into the void.
"""

from __future__ import annotations

import asyncio


def hub_http_protocol() -> type[asyncio.Protocol] | str:
    """The protocol class for uvicorn's `http=` (uvicorn's own choice without httptools)."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # httptools comes with the `http` extra; h11 closes the same way
        return "auto"

    class HubHttpProtocol(HttpToolsProtocol):
        def eof_received(self) -> None:
            cycle = self.cycle
            if cycle is not None and not cycle.response_complete:
                cycle.disconnected = True
                cycle.message_event.set()

    return HubHttpProtocol
