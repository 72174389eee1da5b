"""Running a command under its guard (`jobcore.subprocesses`) with bounded output capture."""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

from jobcore.errors import InvalidPayload
from jobcore.subprocesses import STOP_GRACE, GuardedProcess, shell_args, spawn

KILL_GRACE = STOP_GRACE  # seconds between SIGTERM and SIGKILL to the command's tree
MAX_OUTPUT_LIMIT = 16 << 20  # bytes kept per stream at most, whatever a payload asks


def check_output_limit(payload: Any, config: Any = None) -> None:
    """Enqueue-time check (`JobType.check`): `output_limit` over MAX_OUTPUT_LIMIT is refused.

    Not a validator of the payload model: a job enqueued before this limit (or past it by
    a producer's own store) still runs, its streams cut at run time (`kept_bytes`).
    """
    value = payload.output_limit
    if value > MAX_OUTPUT_LIMIT:
        raise InvalidPayload(
            f"output_limit: {value} bytes is over the maximum of {MAX_OUTPUT_LIMIT} (16 MiB) "
            "per stream; the output is kept in the worker's memory, and a result over "
            "max_result_bytes (256 KiB by default) is stored truncated anyway"
        )


def kept_bytes(output_limit: int, max_result_bytes: int) -> int:
    """What a job keeps of each stream: no more than a result can store (max_result_bytes)."""
    return min(output_limit, max_result_bytes, MAX_OUTPUT_LIMIT)


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


def _feed(stream: IO[bytes], data: bytes) -> None:
    with contextlib.suppress(OSError), stream:  # a command that stops reading: its business
        stream.write(data)


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


def kill_group(proc: GuardedProcess) -> None:
    """End the command's whole tree (its group and whatever left it): SIGTERM, then SIGKILL."""
    proc.stop(KILL_GRACE)


def run_command(
    args: str | Sequence[str],
    *,
    shell: bool,
    cwd: str | None,
    env: Mapping[str, str] | None,
    timeout: float | None,
    output_limit: int,
    should_stop: Callable[[], str | None],
    input: bytes | None = None,
    stdin: IO[bytes] | None = None,
    stdout: IO[bytes] | None = None,
) -> Finished:
    """Run to completion, or until `timeout` or `should_stop()` returns a reason; then kill
    the command's tree.

    Standard input is `input` (written through a pipe) or the readable file `stdin`, else
    /dev/null; `stdout` is a file its standard output goes to instead of the captured tail.
    """
    if input is not None and stdin is not None:
        raise ValueError("give input or stdin, not both")
    started = time.perf_counter()
    full_env = None if env is None else {**os.environ, **env}
    argv = list(args) if not isinstance(args, str) else shell_args(args) if shell else [args]
    proc = spawn(
        argv,
        cwd=cwd,
        env=full_env,
        stdin=subprocess.PIPE
        if input is not None
        else subprocess.DEVNULL
        if stdin is None
        else stdin,
        stdout=subprocess.PIPE if stdout is None else stdout,
        stderr=subprocess.PIPE,
        grace=KILL_GRACE,
    )
    assert proc.stderr is not None
    output_limit = min(output_limit, MAX_OUTPUT_LIMIT)  # memory stays bounded for every caller
    out, err = TailBuffer(output_limit), TailBuffer(output_limit)
    pumps = [threading.Thread(target=_pump, args=(proc.stderr, err), daemon=True)]
    if proc.stdout is not None:
        pumps.append(threading.Thread(target=_pump, args=(proc.stdout, out), daemon=True))
    if input is not None:
        assert proc.stdin is not None
        pumps.append(threading.Thread(target=_feed, args=(proc.stdin, input), daemon=True))
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
    # the guard killed whatever was left of the tree before it exited: the pipes are closed
    for pump in pumps:
        pump.join(5 if stopped is None else 0.5)
    return Finished(
        exit_code=proc.wait(),
        stdout=out,
        stderr=err,
        duration_ms=(time.perf_counter() - started) * 1000,
        stopped=stopped,
    )
