"""jobcore's SQLite busy handler keeps its timeout on the clock."""

from __future__ import annotations

import threading
import time

from jobcore.storage.sqlite_busy import busy_waiter


def _wait_out(timeout_ms: int) -> float:
    """Seconds one lock wait lasts when the lock never comes free."""
    wait = busy_waiter(timeout_ms)
    began = time.monotonic()
    calls = 0
    while wait(calls):
        calls += 1
    return time.monotonic() - began


def test_the_timeout_is_kept_alone() -> None:
    assert 0.3 <= _wait_out(300) < 0.45


def test_the_timeout_is_kept_while_other_threads_hold_the_interpreter() -> None:
    # each sleep ends late when busy threads hold the GIL; the handler used to add up the
    # sleeps it asked for, so the wait lasted far past its timeout
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    spinners = [threading.Thread(target=spin) for _ in range(4)]
    for spinner in spinners:
        spinner.start()
    try:
        waited = _wait_out(300)
    finally:
        stop.set()
        for spinner in spinners:
            spinner.join()
    assert 0.3 <= waited < 0.45


def test_each_new_wait_has_the_whole_timeout() -> None:
    wait = busy_waiter(200)
    assert _wait_out(200) >= 0.2
    calls = 0
    while wait(calls):
        calls += 1
    began = time.monotonic()
    assert wait(0)  # SQLite starts counting again for the next lock
    assert time.monotonic() - began < 0.05
