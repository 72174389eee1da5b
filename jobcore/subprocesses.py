"""Commands whose whole process tree lives no longer than their job, nor than the worker.

Every command a job runs (the `shell` job type, the claude cli backend, the agent's
`exec` jobs, the dlq `notify_command`) is started through `spawn`: a small guard
process (`jobcore/_guard.py`) in a new session starts it and holds it. On Linux the
guard is a child subreaper, so descendants that leave the process group (`setsid`,
double forks) stay below it. When the command exits, the rest of its tree is
killed; `GuardedProcess.stop` ends the tree (SIGTERM, then SIGKILL after the
grace period); and when the worker process dies, even by SIGKILL or the OOM
killer, the guard notices at once (its socket to the worker closes) and ends the
tree. A thread-bound `PR_SET_PDEATHSIG` is not used: commands start on executor
threads, and the death of a thread must not kill a command.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

GUARD = str(Path(__file__).with_name("_guard.py"))
STOP_GRACE = 2.0  # seconds between SIGTERM and SIGKILL to the tree
_LAST_RESORT = 5.0  # seconds given to the guard to report before its group is killed
_STARTUP = 60.0  # seconds a guard may take to start the command (a loaded machine)

Stream = int | IO[Any] | None


class GuardedProcess:
    """A command started through its guard; `returncode` is the command's, not the guard's."""

    def __init__(self, popen: subprocess.Popen[bytes], channel: _Channel, pid: int) -> None:
        self.popen = popen
        self.pid = pid  # the command's own pid
        self.group = popen.pid  # the guard leads the session and the group
        self._channel = channel
        self.returncode: int | None = None

    @property
    def stdin(self) -> IO[bytes] | None:
        return self.popen.stdin

    @property
    def stdout(self) -> IO[bytes] | None:
        return self.popen.stdout

    @property
    def stderr(self) -> IO[bytes] | None:
        return self.popen.stderr

    def poll(self) -> int | None:
        if self.popen.poll() is None:
            return None
        return self._settle()

    def wait(self, timeout: float | None = None) -> int:
        """The command's exit code once its guard ended (TimeoutExpired as Popen.wait)."""
        self.popen.wait(timeout)
        return self._settle()

    def _settle(self) -> int:
        if self.returncode is None:
            code = self._channel.read(wait=0).get("exit")
            self.returncode = code if isinstance(code, int) else self.popen.returncode
            self._channel.close()
        assert self.returncode is not None
        return self.returncode

    def stop(self, grace: float = STOP_GRACE) -> None:
        """End the command's whole tree: SIGTERM, SIGKILL after `grace`; everything reaped."""
        if self.popen.poll() is None:
            self._channel.send(b"term")
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                self._channel.send(b"kill")
                try:
                    self.popen.wait(_LAST_RESORT)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(self.group, signal.SIGKILL)
                    self.popen.wait()
        self._settle()


class _Channel:
    """The worker's end of the socket to a guard: JSON lines each way."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buffer = b""

    def send(self, message: bytes) -> None:
        with contextlib.suppress(OSError):
            self.sock.sendall(message + b"\n")

    def read(self, *, wait: float) -> dict[str, Any]:
        """The guard's next message ({} at EOF, or when none came within `wait` seconds)."""
        self.sock.settimeout(wait)
        while b"\n" not in self._buffer:
            try:
                chunk = self.sock.recv(65536)
            except OSError:  # a timeout included
                return {}
            if not chunk:
                return {}
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        message: dict[str, Any] = json.loads(line)
        return message

    def close(self) -> None:
        self.sock.close()


def spawn(
    args: Sequence[str],
    *,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    stdin: Stream = subprocess.DEVNULL,
    stdout: Stream = None,
    stderr: Stream = None,
    grace: float = STOP_GRACE,
) -> GuardedProcess:
    """Start `args` (no shell: pass ["/bin/sh", "-c", cmd] for one) under a guard.

    Raises the OSError the command's start raised (FileNotFoundError,
    NotADirectoryError for `cwd`, PermissionError), as `subprocess.Popen` would, and
    ValueError for arguments no program can receive (an embedded NUL).
    """
    sock, theirs = socket.socketpair()
    try:
        popen = subprocess.Popen(
            [sys.executable, "-I", "-S", GUARD, str(theirs.fileno())],
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            pass_fds=(theirs.fileno(),),
            start_new_session=True,
        )
    except BaseException:
        sock.close()
        raise
    finally:
        theirs.close()
    ours = _Channel(sock)
    spec = {"args": list(args), "cwd": cwd, "env": None if env is None else dict(env)}
    try:
        ours.sock.sendall(json.dumps({**spec, "grace": grace}).encode() + b"\n")
        reply = ours.read(wait=_STARTUP)
    except BaseException:
        _abandon(popen, ours)
        raise
    if "pid" not in reply:
        _abandon(popen, ours)
        error = reply.get("error")
        if isinstance(error, list) and len(error) == 3:
            raise OSError(*error)
        if "invalid" in reply:
            raise ValueError(f"cannot start the command: {reply['invalid']}")
        raise OSError(f"the command's guard did not start it (guard exit {popen.returncode})")
    return GuardedProcess(popen, ours, int(reply["pid"]))


def _abandon(popen: subprocess.Popen[bytes], channel: _Channel) -> None:
    channel.close()  # a guard still waiting for us ends the tree and exits
    try:
        popen.wait(_LAST_RESORT)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(popen.pid, signal.SIGKILL)
        popen.wait()
    for stream in (popen.stdin, popen.stdout, popen.stderr):
        if stream is not None:
            stream.close()


def shell_args(command: str) -> list[str]:
    """The argv that runs `command` through /bin/sh, as `subprocess` does for shell=True."""
    return ["/bin/sh", "-c", command]
