"""Running a command in its own process group with bounded output capture."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO

KILL_GRACE = 2.0  # seconds between SIGTERM and SIGKILL to the group


class TailBuffer:
    """Keeps the last `limit` bytes of a stream and whether anything was dropped."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._chunks: deque[bytes] = deque()
        self._size = 0
        self.truncated = False

    def feed(self, chunk: bytes) -> None:
        self._chunks.append(chunk)
        self._size += len(chunk)
        while self._size > self.limit and self._chunks:
            excess = self._size - self.limit
            first = self._chunks[0]
            self.truncated = True
            if len(first) <= excess:
                self._chunks.popleft()
                self._size -= len(first)
            else:
                self._chunks[0] = first[excess:]
                self._size -= excess

    def text(self) -> str:
        return b"".join(self._chunks).decode("utf-8", errors="replace")


def _pump(stream: IO[bytes], buffer: TailBuffer) -> None:
    with stream:
        fd = stream.fileno()
        for chunk in iter(lambda: os.read(fd, 65536), b""):
            buffer.feed(chunk)


@dataclass
class Finished:
    exit_code: int
    stdout: TailBuffer
    stderr: TailBuffer
    duration_ms: float
    stopped: str | None  # "timeout" or the caller's stop reason, when the group was killed


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the whole process group, then SIGKILL what is left after a grace period."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        if wait is None:
            break
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            continue
        break
    with contextlib.suppress(ProcessLookupError):  # grandchildren that ignored SIGTERM
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def run_command(
    args: str | Sequence[str],
    *,
    shell: bool,
    cwd: str | None,
    env: Mapping[str, str] | None,
    timeout: float | None,
    output_limit: int,
    should_stop: Callable[[], str | None],
    stdin: IO[bytes] | None = None,
    stdout: IO[bytes] | None = None,
) -> Finished:
    """Run to completion, or until `timeout` or `should_stop()` returns a reason; then kill the group.

    `stdin` is a readable file the command gets as its standard input (default: none);
    `stdout` a file its standard output goes to instead of the captured tail.
    """
    started = time.perf_counter()
    full_env = None if env is None else {**os.environ, **env}
    proc = subprocess.Popen(
        args,
        shell=shell,
        cwd=cwd,
        env=full_env,
        stdin=subprocess.DEVNULL if stdin is None else stdin,
        stdout=subprocess.PIPE if stdout is None else stdout,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group, so we can kill grandchildren too
    )
    assert proc.stderr is not None
    out, err = TailBuffer(output_limit), TailBuffer(output_limit)
    pumps = [threading.Thread(target=_pump, args=(proc.stderr, err), daemon=True)]
    if proc.stdout is not None:
        pumps.append(threading.Thread(target=_pump, args=(proc.stdout, out), daemon=True))
    for pump in pumps:
        pump.start()
    deadline = None if timeout is None else time.monotonic() + timeout
    stopped: str | None = None
    try:
        while True:
            try:
                proc.wait(0.05)
                break
            except subprocess.TimeoutExpired:
                pass
            reason = should_stop()
            if reason is None and deadline is not None and time.monotonic() >= deadline:
                reason = "timeout"
            if reason is not None:
                stopped = reason
                kill_group(proc)
                break
    except BaseException:  # should_stop() raised, or an interrupt: the command does not outlive us
        kill_group(proc)
        raise
    if stopped is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # nothing of the command outlives it
    for pump in pumps:  # a process that left the group may hold the pipes: do not wait long
        pump.join(5 if stopped is None else 0.5)
    return Finished(
        exit_code=proc.returncode,
        stdout=out,
        stderr=err,
        duration_ms=(time.perf_counter() - started) * 1000,
        stopped=stopped,
    )
