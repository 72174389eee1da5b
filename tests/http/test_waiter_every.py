"""`ChangeWaiter.subscribe(..., every=)`: a subscriber called without changes too."""

from __future__ import annotations

import itertools
import time

from jobcore_http.waiter import ChangeWaiter
from testenv import wait_for


class QuietStore:
    """Never changes."""

    def wait_for_change(self, timeout: float) -> bool:
        return False


def test_a_periodic_subscriber_is_called_without_changes_and_a_plain_one_is_not() -> None:
    waiter = ChangeWaiter(QuietStore(), "quiet-store-for-test", interval=0.005)
    periodic: list[float] = []
    plain: list[float] = []
    waiter.subscribe(lambda: periodic.append(time.monotonic()), every=0.05)
    waiter.subscribe(lambda: plain.append(time.monotonic()))
    waiter.start()
    try:
        wait_for(lambda: len(periodic) >= 3, timeout=10)
        assert plain == [] and waiter.generation == 0
        quiet = list(periodic)
        waiter.poke()  # a change: everyone is called
        wait_for(lambda: len(plain) == 1, timeout=10)
    finally:
        waiter.stop()
    assert all(b - a >= 0.05 for a, b in itertools.pairwise(quiet))  # not on every check
