"""Running one call on several threads at the same moment, for races."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def at_once(count: int, call: Callable[[], T]) -> list[T | BaseException]:
    """`call` on `count` threads released together; each one's answer, or what it raised
    (reported to the test, not lost in its thread)."""
    start = threading.Barrier(count)
    results: list[T | BaseException] = []

    def one() -> None:
        start.wait()
        try:
            results.append(call())
        except BaseException as exc:
            results.append(exc)

    threads = [threading.Thread(target=one) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results
