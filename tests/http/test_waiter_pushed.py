"""`ChangeWaiter` over a store that pushes its changes: no 3 ms polling, pokes still heard."""

from __future__ import annotations

import time

import pytest
from jobcore_http import waiter as waiter_module
from jobcore_http.waiter import PUSHED_CHECK, ChangeWaiter
from testenv import wait_for


class CountingStore:
    """Never changes by itself; counts the waiter's looks."""

    def __init__(self, pushes: bool) -> None:
        self.pushes_changes = pushes
        self.looks = 0

    def wait_for_change(self, timeout: float) -> bool:
        self.looks += 1
        return False


def _looks_in(store: CountingStore, seconds: float) -> tuple[int, ChangeWaiter, list[float]]:
    waiter = ChangeWaiter(store, f"counting-store-{id(store)}", interval=0.003)
    called: list[float] = []
    waiter.subscribe(lambda: called.append(time.monotonic()))
    waiter.start()
    time.sleep(seconds)
    return store.looks, waiter, called


def test_a_pushing_store_is_looked_at_rarely() -> None:
    store = CountingStore(pushes=True)
    looks, waiter, called = _looks_in(store, 0.6)
    waiter.stop()
    # polling every 3 ms would have looked about 200 times
    assert looks <= 0.6 / PUSHED_CHECK + 2
    assert called == []


def test_a_poke_wakes_the_subscribers_of_a_pushing_store(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(waiter_module, "PUSHED_CHECK", 600.0)  # only a poke can wake it now
    store = CountingStore(pushes=True)
    _, waiter, called = _looks_in(store, 0.1)
    try:
        waiter.poke()
        wait_for(lambda: len(called) == 1, timeout=10)
    finally:
        waiter.stop()


def test_a_store_that_stops_pushing_is_polled_again() -> None:
    store = CountingStore(pushes=True)
    _, waiter, _ = _looks_in(store, 0.3)
    try:
        store.pushes_changes = False  # e.g. the listener lost its connection
        before = store.looks
        wait_for(lambda: store.looks >= before + 20, timeout=10)
    finally:
        waiter.stop()
