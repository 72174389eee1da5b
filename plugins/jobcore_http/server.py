"""Running the app under uvicorn, with the hub's graceful SIGTERM.

On SIGTERM/SIGINT: stop accepting connections, answer waiting long-polls
(204), end event streams with a `retry:` hint, let in-flight requests finish
(up to `shutdown_timeout`), commit what the engine holds, exit 0 (uvicorn
would re-raise the signal; the hub does not).
"""

from __future__ import annotations

import faulthandler
import logging
import signal
import socket
import sys
from types import FrameType

import uvicorn

from jobcore.errors import JobcoreError
from jobcore_http.app import create_app
from jobcore_http.hub import Hub
from jobcore_http.protocol import hub_http_protocol

log = logging.getLogger("jobcore.http")


class HubServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, hub: Hub) -> None:
        super().__init__(config)
        self.hub = hub

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # a signal handler may interrupt this thread while it holds a lock: take none here,
        # let the event loop run the shutdown steps
        self.hub.request_shutdown()
        super().handle_exit(sig, frame)
        self._captured_signals.clear()  # a clean shutdown exits 0


def listen(host: str, port: int) -> socket.socket:
    """Bind the listening socket first, so a taken port is one clear error."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto IPPROTO_TCP: asyncio sets TCP_NODELAY only on sockets that say they are TCP;
    # without it a keep-alive response waits ~40 ms for the client's delayed ACK
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise JobcoreError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def run(hub: Hub, host: str, port: int) -> None:
    faulthandler.register(signal.SIGUSR2, all_threads=True)  # `kill -USR2`: every thread's stack
    sock = listen(host, port)
    bound = sock.getsockname()[1]
    config = uvicorn.Config(
        create_app(hub),
        log_level="warning",
        access_log=False,  # tokens never reach logs; paths are not needed there either
        timeout_graceful_shutdown=int(hub.settings.shutdown_timeout),
        server_header=False,
        lifespan="on",
        http=hub_http_protocol(),  # a client's EOF is seen at once (claims answered into it)
        ssl_certfile=hub.settings.tls_cert,
        ssl_keyfile=hub.settings.tls_key,
    )
    server = HubServer(config, hub)
    shown = f"[{host}]" if ":" in host else host
    scheme = "https" if hub.settings.tls_cert else "http"
    print(f"jobcore hub listening on {scheme}://{shown}:{bound}", file=sys.stderr, flush=True)
    if hub.settings.insecure_no_auth:
        print(
            "WARNING: --insecure-no-auth: every request acts as admin; use only on a trusted network",
            file=sys.stderr,
            flush=True,
        )
    server.run(sockets=[sock])
