"""Commands whose whole process tree lives no longer than their job, nor than the worker.

Every command a job runs (the `shell` job type, the claude cli backend, the agent's
`exec` jobs, the dlq `notify_command`) is started through `spawn`. A guard server
(`jobcore/_guard.py`, one per worker process, started on first use) forks a small
guard for each command, which starts the command in a new session and holds it.
On Linux the guard is a child subreaper, so descendants that leave the process
group (`setsid`, double forks) stay below it. When the command exits, the rest
of its tree is killed; `GuardedProcess.stop` ends the tree (SIGTERM, then SIGKILL
after the grace period); and when the worker process dies, even by SIGKILL or
the OOM killer, the guard notices at once (its socket to the worker closes) and
ends the tree. A thread-bound `PR_SET_PDEATHSIG` is not used: commands start on
executor threads, and the death of a thread must not kill a command.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

GUARD = str(Path(__file__).with_name("_guard.py"))
STOP_GRACE = 2.0  # seconds between SIGTERM and SIGKILL to the tree
_LAST_RESORT = 5.0  # seconds given to the guard to report before it is killed
_STARTUP = 60.0  # seconds a guard may take to start the command (a loaded machine)
PIPE, DEVNULL = subprocess.PIPE, subprocess.DEVNULL

Stream = int | IO[Any] | None


class _Channel:
    """The worker's end of the socket to a guard: short ASCII lines from it."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buffer = b""

    def send(self, message: bytes) -> None:
        with contextlib.suppress(OSError):
            self.sock.sendall(message + b"\n")

    def read(self, wait: float | None) -> list[str] | None:
        """The guard's next message as words: [] at EOF, None when none came within `wait`."""
        self.sock.settimeout(wait)
        while b"\n" not in self._buffer:
            try:
                chunk = self.sock.recv(65536)
            except (TimeoutError, BlockingIOError):
                return None
            except OSError:
                return []
            if not chunk:
                return []
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode("ascii").split(" ")

    def close(self) -> None:
        self.sock.close()


class GuardedProcess:
    """A command started under its guard; `returncode` is the command's exit code
    (negative: the signal that ended it; -9 when its guard was killed)."""

    def __init__(
        self,
        channel: _Channel,
        pid: int,
        group: int,
        streams: tuple[IO[bytes] | None, IO[bytes] | None, IO[bytes] | None],
    ) -> None:
        self.pid = pid  # the command's own pid
        self.group = group  # the guard's pid (it leads a session; the command leads another)
        self.stdin, self.stdout, self.stderr = streams
        self._channel = channel
        self.returncode: int | None = None

    def _take(self, wait: float | None) -> None:
        while self.returncode is None:
            words = self._channel.read(wait)
            if words is None:
                return
            if not words:  # the guard is gone without a word
                self.returncode = -signal.SIGKILL
            elif words[0] == "exit":
                self.returncode = -signal.SIGKILL if words[1:] == ["-"] else int(words[1])
            else:
                continue
            self._channel.close()

    def poll(self) -> int | None:
        self._take(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """The command's exit code once its whole tree ended (TimeoutExpired as Popen.wait)."""
        self._take(timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0)
        return self.returncode

    def stop(self, grace: float = STOP_GRACE) -> None:
        """End the command's whole tree: SIGTERM, SIGKILL after `grace`; everything reaped."""
        if self.poll() is not None:
            return
        self._channel.send(b"term")
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.wait(grace)
            return
        self._channel.send(b"kill")
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.wait(_LAST_RESORT)
            return
        for group in (self.pid, self.group):  # the command's group, then its guard; the
            with contextlib.suppress(ProcessLookupError):  # guard server kills what is left
                os.killpg(group, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.wait(_LAST_RESORT)
            return
        self.returncode = -signal.SIGKILL
        self._channel.close()


class _Server:
    """The guard server of this process, started on first use and again if it died."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._popen: subprocess.Popen[bytes] | None = None
        self._owner = 0

    def _start(self) -> socket.socket:
        ours, theirs = socket.socketpair()
        try:
            self._popen = subprocess.Popen(
                [sys.executable, "-I", "-S", GUARD, str(theirs.fileno())],
                stdin=DEVNULL,
                stdout=DEVNULL,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,  # a terminal's Ctrl-C is the worker's to handle
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._sock, self._owner = ours, os.getpid()
        return ours

    def _drop(self) -> None:
        if self._sock is not None:
            self._sock.close()
        self._sock = None
        if self._popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._popen.wait(1)  # it exits at the closed socket

    def request(self, fds: list[int]) -> None:
        """Ask the server to fork a guard holding `fds` (channel, stdin, stdout, stderr)."""
        with self._lock:
            for attempt in range(2):
                sock = self._sock
                alive = self._popen is not None and self._popen.poll() is None
                if sock is None or self._owner != os.getpid() or not alive:
                    self._drop()
                    sock = self._start()
                try:
                    socket.send_fds(sock, [b"c"], fds)
                    return
                except OSError:
                    self._drop()
                    if attempt:
                        raise


_server = _Server()


def _stream(spec: Stream, *, reading: bool) -> tuple[int, IO[bytes] | None, bool]:
    """(fd for the command, the worker's end or None, whether to close that fd after)."""
    if spec == PIPE:
        r, w = os.pipe()
        if reading:  # the command writes, the worker reads
            return w, os.fdopen(r, "rb"), True
        return r, os.fdopen(w, "wb"), True
    if spec == DEVNULL:
        return os.open(os.devnull, os.O_RDWR), None, True
    if spec is None:
        return (1 if reading else 0), None, False
    if isinstance(spec, int):
        return spec, None, False
    return spec.fileno(), None, False


def _spec(
    args: Sequence[str], cwd: str | None, env: Mapping[str, str] | None, grace: float
) -> bytes:
    """The guard's instructions: `LENGTH\\n` and NUL-separated fields (see jobcore/_guard.py)."""
    if not args:
        raise ValueError("no program to run: empty argument list")
    fields = [repr(float(grace)), cwd or "", str(len(args)), *args]
    if env is None:
        fields.append("-")
    else:
        for name, value in env.items():
            if not name or "=" in name:
                raise ValueError(f"illegal environment variable name {name!r}")
            fields.append(f"{name}={value}")
    encoded = [os.fsencode(field) for field in fields]  # UnicodeEncodeError is a ValueError
    if any(b"\0" in field for field in encoded):
        raise ValueError("embedded null byte")
    body = b"\0".join(encoded)
    return b"%d\n" % len(body) + body


def spawn(
    args: Sequence[str],
    *,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    stdin: Stream = DEVNULL,
    stdout: Stream = None,
    stderr: Stream = None,
    grace: float = STOP_GRACE,
) -> GuardedProcess:
    """Start `args` (no shell: pass ["/bin/sh", "-c", cmd] for one) under a guard.

    `stdin`/`stdout`/`stderr` take PIPE, DEVNULL, None (the worker's own), an fd
    or a file, as with `subprocess.Popen`. Raises the OSError the command's start
    raised (FileNotFoundError, NotADirectoryError for `cwd`, PermissionError), and
    ValueError for arguments no program can receive (an embedded NUL, an empty list).
    """
    try:  # the worker's folder and environment now, not when the server started
        here: str | None = os.getcwd()
    except OSError:  # the folder was deleted
        here = None
    if here is not None:
        cwd = here if cwd is None else os.path.join(here, cwd)  # a relative one: below it
    spec = _spec(args, cwd, os.environ if env is None else env, grace)  # ValueError first
    streams: list[tuple[int, IO[bytes] | None, bool]] = []
    channel: _Channel | None = None
    try:
        for stream, reading in ((stdin, False), (stdout, True), (stderr, True)):
            streams.append(_stream(stream, reading=reading))
        for attempt in range(2):
            channel, reply = _ask([fd for fd, _, _ in streams], spec)
            if reply != [] or attempt:
                break
            channel.close()  # the request died with the server: nothing started; a new one
        if channel is not None and reply is not None and reply[:1] == ["guard"]:
            reply = channel.read(_STARTUP)
    except BaseException:
        if channel is not None:
            channel.close()  # a guard still waiting for us ends the tree and exits
        _close(tuple(end for _, end, _ in streams))
        raise
    finally:
        for fd, _, close in streams:
            if close:
                os.close(fd)
    assert channel is not None
    ends = (streams[0][1], streams[1][1], streams[2][1])
    if reply and reply[0] == "pid":
        return GuardedProcess(channel, int(reply[1]), int(reply[2]), ends)
    channel.close()
    _close(ends)
    if reply and reply[0] == "error":
        number = int(reply[1])
        name = os.fsdecode(bytes.fromhex(reply[2])) if len(reply) > 2 and reply[2] else None
        raise OSError(number, os.strerror(number), name)
    raise OSError("the command's guard ended before it reported the start")


def _ask(fds: list[int], spec: bytes) -> tuple[_Channel, list[str] | None]:
    """Have the server fork a guard holding `fds` and send it `spec`: the guard's channel
    and its first word ([] when the request died with the server: nothing was started)."""
    ours, theirs = socket.socketpair()
    channel = _Channel(ours)
    try:
        try:
            _server.request([theirs.fileno(), *fds])
        finally:
            theirs.close()
        try:
            ours.sendall(spec)
        except (BrokenPipeError, ConnectionResetError):
            return channel, []
        return channel, channel.read(_STARTUP)
    except BaseException:
        channel.close()
        raise


def _close(ends: tuple[IO[bytes] | None, ...]) -> None:
    for end in ends:
        if end is not None:
            end.close()


def shell_args(command: str) -> list[str]:
    """The argv that runs `command` through /bin/sh, as `subprocess` does for shell=True, with
    `--` so a command starting with `-` or `+` is the command, not options (`$0` stays sh)."""
    return ["/bin/sh", "-c", "--", command]
