"""Failure notifications, sent off the worker's path on one bounded background thread.

`jobcore_job_failed` only queues the notification: the hook returns at once, so a
slow `notify_command` or `notify_url` never holds up the worker's other hooks and
lifecycle lines. At most `CAPACITY` wait; beyond that a notification is dropped
and logged. A worker's stop (and the process's exit, unless a stop just gave up)
waits for the backlog, up to a bound. Each notification is bounded too: the command
runs under a guard that ends its whole process tree at `notify_timeout`; the POST
has one total deadline for connecting, sending and reading, and reads at most
`READ_LIMIT` bytes.
"""

from __future__ import annotations

import atexit
import contextlib
import http.client
import logging
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from typing import IO, TYPE_CHECKING, Any

from jobcore.subprocesses import STOP_GRACE

if TYPE_CHECKING:
    from jobcore_dlq import DlqSettings

log = logging.getLogger("jobcore.dlq")

CAPACITY = 100  # notifications waiting at most; more are dropped (and logged)
READ_LIMIT = 64 * 1024  # bytes of a notify_url response read before the connection is closed

Item = tuple["DlqSettings", str, bytes]


class Notifier:
    """One background thread delivering queued notifications in order."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._cond = threading.Condition()
        self._pending: deque[Item] = deque()
        self._busy = False
        self._given_up = False  # the last flush gave up on the backlog; nothing queued since
        self._thread: threading.Thread | None = None

    def submit(self, settings: DlqSettings, job_id: str, body: bytes) -> None:
        with self._cond:
            if len(self._pending) >= self.capacity:
                log.error(
                    "dlq notification for job %s dropped: %d are already waiting to be sent",
                    job_id,
                    len(self._pending),
                )
                return
            self._pending.append((settings, job_id, body))
            self._given_up = False
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._main, name="jobcore-dlq-notify", daemon=True
                )
                self._thread.start()
                atexit.register(self._at_exit)
            self._cond.notify_all()

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every queued notification was sent, up to `timeout` (default: from
        the pending settings); what is still waiting then is logged and left."""
        with self._cond:
            if timeout is None:
                longest = max((s.notify_timeout for s, _, _ in self._pending), default=0.0)
                timeout = 2 * longest + STOP_GRACE + 1
            deadline = time.monotonic() + timeout
            while self._pending or self._busy:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self._given_up = True
                    log.error(
                        "dlq: %d notification(s) not sent after waiting %gs at shutdown",
                        len(self._pending) + self._busy,
                        timeout,
                    )
                    return
                self._cond.wait(remaining)

    def _at_exit(self) -> None:
        """The process ends: wait for the backlog, unless a worker's stop just waited for it
        and gave up (one bound for a stop, not two in a row)."""
        with self._cond:
            given_up = self._given_up
        if not given_up:
            self.flush()

    def _main(self) -> None:
        while True:
            with self._cond:
                while not self._pending:
                    self._cond.wait()
                settings, job_id, body = self._pending.popleft()
                self._busy = True
            try:
                deliver(settings, job_id, body)
            except Exception:  # a notifier never takes its thread down
                log.exception("dlq notification for job %s failed", job_id)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()


def deliver(settings: DlqSettings, job_id: str, body: bytes) -> None:
    if settings.notify_command:
        run_command(settings.notify_command, settings.notify_timeout, job_id, body)
    if settings.notify_url:
        post(settings.notify_url, settings.notify_timeout, job_id, body)


def run_command(command: str, timeout: float, job_id: str, body: bytes) -> None:
    """The command through /bin/sh, the job on stdin; its whole tree is ended at `timeout`."""
    from jobcore_shell.runner import run_command as run

    try:
        finished = run(
            command,
            shell=True,
            cwd=None,
            env=None,
            timeout=timeout,
            output_limit=4096,
            should_stop=lambda: None,
            input=body,
        )
    except OSError as exc:
        log.error("dlq notify_command could not start for job %s: %s", job_id, exc)
        return
    if finished.stopped is not None:
        log.error("dlq notify_command timed out after %gs for job %s", timeout, job_id)
    elif finished.exit_code != 0:
        log.error(
            "dlq notify_command exited %d for job %s: %s",
            finished.exit_code,
            job_id,
            finished.stderr.text().strip()[-500:],
        )


class _Cutter:
    """The sockets of one POST, shut down when its deadline passes (even mid-connect)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self.expired = False

    def add(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            if self.expired:
                _shut(sock)

    def cut(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._sockets:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)  # a blocked recv or send returns at once


def post(url: str, timeout: float, job_id: str, body: bytes) -> None:
    """POST `body`; one deadline for all of it (a trickling server is cut off), and at most
    READ_LIMIT bytes of the answer are read."""
    cutter = _Cutter()
    opener = urllib.request.build_opener(_Handler(cutter), _SecureHandler(cutter), _HttpRedirects())
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"content-type": "application/json", "user-agent": "jobcore-dlq"},
    )
    timer = threading.Timer(timeout, cutter.cut)
    timer.daemon = True
    timer.start()
    try:
        with opener.open(request, timeout=timeout) as response:
            response.read(READ_LIMIT)
        if cutter.expired:  # a body cut short reads as its end
            log.error("dlq notify_url timed out after %gs for job %s", timeout, job_id)
    except urllib.error.HTTPError as exc:
        exc.close()
        log.error("dlq notify_url answered %d for job %s", exc.code, job_id)
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
        if cutter.expired:
            log.error("dlq notify_url timed out after %gs for job %s", timeout, job_id)
        else:
            log.error("dlq notify_url failed for job %s: %s", job_id, exc)
    finally:
        timer.cancel()


def _recording(base: type[http.client.HTTPConnection], cutter: _Cutter) -> Any:
    class Recording(base):  # type: ignore[valid-type,misc]
        def connect(self) -> None:
            super().connect()
            cutter.add(self.sock)

    return Recording


class _Handler(urllib.request.HTTPHandler):
    def __init__(self, cutter: _Cutter) -> None:
        super().__init__()
        self._connection = _recording(http.client.HTTPConnection, cutter)

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._connection, req)


class _HttpRedirects(urllib.request.HTTPRedirectHandler):
    """Redirects to http or https only: an `ftp://` one would leave the total deadline."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: http.client.HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        if urllib.parse.urlsplit(newurl).scheme not in ("http", "https"):
            return None  # the redirect itself is the answer (logged with its status)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


class _SecureHandler(urllib.request.HTTPSHandler):
    def __init__(self, cutter: _Cutter) -> None:
        super().__init__()
        self._connection = _recording(http.client.HTTPSConnection, cutter)

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        context = self._context  # type: ignore[attr-defined]
        return self.do_open(self._connection, req, context=context)
