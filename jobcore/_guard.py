"""The guard of one command a worker runs: `python -I -S _guard.py FD` (stdlib only).

`jobcore.subprocesses` starts this small process in a new session and talks to it
over the socket FD (JSON lines). The guard makes itself a child subreaper (Linux),
so every descendant of the command, even one that left its process group with
`setsid`, stays below it; starts the command; and ends the whole tree when the
command exits, when the worker asks (`term`, then `kill`), or when the worker is
gone: its end of the socket closes when the worker process dies in any way
(SIGKILL, the OOM killer), whichever thread started the command. Then the tree
gets SIGTERM and, after the grace period, SIGKILL; everything is reaped.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from typing import Any

PR_SET_CHILD_SUBREAPER = 36
HAVE_PROC = sys.platform.startswith("linux") and os.path.isdir("/proc/self")


def make_subreaper() -> None:
    """Orphaned descendants reparent to this process instead of init (Linux)."""
    if not HAVE_PROC:
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def descendants() -> list[int]:
    """Every process below this one (children first), found through /proc."""
    me = os.getpid()
    if not HAVE_PROC:
        return []
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(name))
    found: list[int] = []
    todo = [me]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def signal_tree(sig: int) -> bool:
    """Send `sig` to every descendant (or, without /proc, to the own group); False: none left."""
    if not HAVE_PROC:
        with contextlib.suppress(OSError):
            os.killpg(os.getpgrp(), sig)  # the guard handles TERM; KILL ends it as well
        return True
    found = descendants()
    for pid in found:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)
    return bool(found)


class Guard:
    def __init__(self, channel: socket.socket) -> None:
        self.channel = channel
        self.parent = os.getppid()
        self.main: int | None = None
        self.exit_code: int | None = None
        self.terminating = False
        self.kill_at: float | None = None
        self.grace = 2.0

    def send(self, message: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):
            self.channel.sendall(json.dumps(message).encode() + b"\n")

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.main:
                self.exit_code = os.waitstatus_to_exitcode(status)

    def terminate(self) -> None:
        """SIGTERM to the whole tree once; SIGKILL after the grace period."""
        if not self.terminating:
            self.terminating = True
            self.kill_at = time.monotonic() + self.grace
            signal_tree(signal.SIGTERM)

    def finish(self) -> None:
        """SIGKILL until nothing is left below, report the command's exit code, exit."""
        if not HAVE_PROC:  # only the group can be reached, and the guard is part of it
            self.reap()
            self.send({"exit": self.exit_code})
            signal_tree(signal.SIGKILL)
        for _ in range(1000):
            self.reap()
            if not signal_tree(signal.SIGKILL):
                break
            time.sleep(0.005)
        self.reap()
        self.send({"exit": self.exit_code})
        os._exit(0)

    def run(self, spec: dict[str, Any]) -> None:
        self.grace = float(spec.get("grace", 2.0))
        make_subreaper()
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, lambda *_: self.terminate())
        try:
            child = subprocess.Popen(spec["args"], cwd=spec["cwd"], env=spec["env"])
        except OSError as exc:
            self.send({"error": [exc.errno, exc.strerror, exc.filename]})
            os._exit(0)
        except (ValueError, TypeError) as exc:  # a NUL in an argument, an unencodable string
            self.send({"invalid": str(exc)})
            os._exit(0)
        self.main = child.pid
        child.returncode = 0  # the guard reaps every child itself (waitpid(-1))
        self.send({"pid": child.pid})
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):  # the command's pipes close when the command's tree closes them
            os.dup2(null, fd)
        watched: list[Any] = [self.channel, wake_r]
        while True:
            ready, _, _ = select.select(watched, [], [], 0.25)
            if wake_r in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 4096)
            self.reap()
            if self.exit_code is not None:
                self.finish()
            if self.channel in ready:
                try:
                    data = self.channel.recv(4096)
                except OSError:
                    data = b""
                if not data:  # the worker died or let go of the command
                    watched.remove(self.channel)
                    self.terminate()
                elif b"kill" in data:
                    self.finish()
                elif b"term" in data:
                    self.terminate()
            if os.getppid() != self.parent:
                self.terminate()  # the worker is gone (belt and braces beside the socket)
            if self.kill_at is not None and time.monotonic() >= self.kill_at:
                self.finish()


def main() -> None:
    channel = socket.socket(fileno=int(sys.argv[1]))
    line = b""
    while not line.endswith(b"\n"):  # the spec: one JSON line (nothing follows before our reply)
        chunk = channel.recv(1 << 16)
        if not chunk:
            os._exit(1)
        line += chunk
    Guard(channel).run(json.loads(line))


if __name__ == "__main__":
    main()
