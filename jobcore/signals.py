"""SIGINT/SIGTERM for a worker run in the main thread: the first stops claiming and lets
running jobs finish; a second one means now (DESIGN §6, graceful shutdown)."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

log = logging.getLogger("jobcore.worker")


def install(
    stop: Callable[[bool], None], stopping: Callable[[], bool], shutdown_timeout: float
) -> dict[int, Any]:
    """Route SIGINT and SIGTERM to `stop(graceful)`; returns the handlers to restore."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        again = stopping()
        stop(not again)
        # Not logged here: this handler may run in the middle of this thread's own log
        # write (a second signal during the first one's line) and would wait for ever for
        # the lock that write holds. Another thread writes the line once it is free.
        threading.Thread(
            target=log.warning,
            args=(
                "received %s: %s",
                signal.Signals(signum).name,
                "stopping now: releasing unfinished jobs"
                if again
                else f"finishing running jobs (up to {shutdown_timeout:g}s; again to stop now)",
            ),
            name="jobcore-signal-log",
        ).start()

    previous: dict[int, Any] = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        previous[signum] = signal.signal(signum, on_signal)
    return previous


def restore(previous: dict[int, Any]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)
