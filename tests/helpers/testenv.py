"""Environment for `jobcore` subprocesses started by the tests."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HELPERS = Path(__file__).parent


def subprocess_env(**extra: str) -> dict[str, str]:
    """Environment for `jobcore` subprocesses: the test plugin loaded, no stray JOBCORE_* vars."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBCORE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HELPERS), env.get("PYTHONPATH")]))
    env["JOBCORE_PLUGINS"] = "jobcore_test_plugin"
    env.update(extra)
    return env


def enqueue_in_another_process(db: str) -> None:
    """`jobcore enqueue noop {}` on `db`, in a process of its own (its commit is no in-process
    wake-up: a worker hears of it only through the database)."""
    subprocess.run(
        [sys.executable, "-m", "jobcore", "enqueue", "noop", "{}"],
        env=subprocess_env(JOBCORE_DB=db),
        check=True,
        capture_output=True,
        timeout=60,
    )


def count_looks(storage: Any) -> list[float]:
    """Record when anyone calls `storage.wait_for_change` (looks for other processes' commits)."""
    looks: list[float] = []
    look = storage.wait_for_change

    def counted(timeout: float) -> bool:
        looks.append(time.monotonic())
        return bool(look(timeout))

    storage.wait_for_change = counted
    return looks


def open_fds_to(target: str) -> int:
    """This process's descriptors whose link reads `target` (a path, or e.g.
    `anon_inode:inotify`)."""
    found = 0
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):  # closed meanwhile
            found += os.readlink(fd) == target
    return found


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0) -> Any:
    """Poll `predicate` until it returns something truthy (returned), or fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.01)
    raise AssertionError("condition not met in time")


class LocalHTTPServer:
    """A threading HTTP server on 127.0.0.1 (a free port) serving `handler` until `close()`."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
