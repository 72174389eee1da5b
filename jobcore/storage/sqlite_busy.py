"""Waiting for another connection's write lock in Python, not in SQLite's C sleep.

SQLite's own busy timeout sleeps in C and keeps the calling thread there. A
worker's loop runs in the main thread, where Python runs signal handlers only
between bytecodes: two quick SIGTERMs during that sleep were handled once, after
the wait, so "a second signal means now" (DESIGN §6) was lost. Sleeping in
`time.sleep` lets each signal's handler run as it arrives; the waits and the
total are SQLite's own.
"""

from __future__ import annotations

import time
from collections.abc import Callable

DELAYS = (0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.025, 0.025, 0.025, 0.05, 0.05, 0.1)


def pause(calls: int) -> float:
    """Seconds to sleep before trying a busy lock again, after `calls` tries."""
    return DELAYS[min(calls, len(DELAYS) - 1)]


def busy_waiter(timeout_ms: int) -> Callable[[int], bool]:
    """A busy handler for `apsw.Connection.set_busy_handler`: wait up to `timeout_ms` in all.

    The total is measured on the clock, not summed from the sleeps asked for: a sleep
    ends late when other threads hold the interpreter, and summing let a 2 s timeout
    last 2.8 s with four busy threads beside it."""
    limit = timeout_ms / 1000
    began = 0.0

    def wait(calls: int) -> bool:
        """`calls`: how often SQLite already called it for this lock; False gives up (busy)."""
        nonlocal began
        now = time.monotonic()
        if calls == 0:  # a new wait for a lock
            began = now
        left = limit - (now - began)
        if left <= 0:
            return False
        time.sleep(min(pause(calls), left))
        return True

    return wait


__all__ = ["busy_waiter", "pause"]
