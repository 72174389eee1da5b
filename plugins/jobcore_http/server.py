"""Running the app under uvicorn, with the hub's graceful SIGTERM.

On SIGTERM/SIGINT: stop accepting connections, answer waiting long-polls
(204), end event streams with a `retry:` hint, let in-flight requests finish
(up to `shutdown_timeout`), commit what the engine holds, exit 0 (uvicorn
would re-raise the signal; the hub does not).
"""

from __future__ import annotations

import faulthandler
import logging
import resource
import signal
import socket
import sys
from types import FrameType

import uvicorn

from jobcore.errors import JobcoreError
from jobcore_http.app import create_app
from jobcore_http.guard import Limits, guarded_protocol
from jobcore_http.hub import Hub

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


FD_RESERVE = 128  # files the hub needs besides connections: database, log, pool, pipes


def room_for(connections: int) -> int:
    """Raise the open-files limit so `connections` sockets leave room for the hub's own
    files (the sweep must always be able to open the database); the connections that fit."""
    want = connections + FD_RESERVE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= want:
        return connections
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    except (ValueError, OSError):
        pass
    if soft >= want:
        return connections
    fitting = max(soft - FD_RESERVE, 8)
    log.warning(
        "the open-files limit (%d) leaves room for %d connections, not max_connections=%d",
        soft,
        fitting,
        connections,
    )
    return fitting


def _uvicorn_logs() -> None:
    """Send uvicorn's log lines (a client's malformed request, a failed ASGI call) through
    jobcore's handler, so they take `--log-format` (JSON lines in JSON mode) like every
    other line of the hub; uvicorn's own config wrote them as plain text."""
    uvicorn_log = logging.getLogger("uvicorn")
    uvicorn_log.handlers = list(logging.getLogger("jobcore").handlers)
    uvicorn_log.propagate = False
    uvicorn_log.setLevel(logging.WARNING)
    logging.getLogger("uvicorn.access").disabled = True


def run(hub: Hub, host: str, port: int) -> None:
    faulthandler.register(signal.SIGUSR2, all_threads=True)  # `kill -USR2`: every thread's stack
    sock = listen(host, port)
    bound = sock.getsockname()[1]
    settings = hub.settings
    limits = Limits(
        max_connections=room_for(settings.max_connections),
        head_timeout=settings.head_timeout,
        max_header_bytes=settings.max_header_bytes,
        write_timeout=settings.body_timeout,  # to take an answer, as to send a body
    )
    config = uvicorn.Config(
        create_app(hub),
        http=guarded_protocol(limits),
        log_level="warning",
        access_log=False,  # tokens never reach logs; paths are not needed there either
        timeout_graceful_shutdown=int(hub.settings.shutdown_timeout),
        server_header=False,
        lifespan="on",
        log_config=None,  # uvicorn's own lines go through jobcore's handler (_uvicorn_logs)
        ssl_certfile=hub.settings.tls_cert,
        ssl_keyfile=hub.settings.tls_key,
    )
    _uvicorn_logs()
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
