"""One change waiter per hub process: notices commits by any process on the store.

A single thread asks the store whether another connection committed
(`Storage.wait_for_change`, SQLite: `PRAGMA data_version`) every
`interval`, and is poked at once by commits in this process (`jobcore.wakeup`).
A store that `pushes_changes` (PostgreSQL's listener) pokes it for every
commit, by any process (`wakeup.every_change`): while it does, the thread only wakes when poked, or
every `PUSHED_CHECK` seconds to look once anyway. A store that watches its writes
(`powers.WatchesWrites`, SQLite on Linux) lets it look only while someone writes,
and every `PUSHED_CHECK` seconds otherwise.
Every change calls each subscriber once; long-polls and event streams wait on
it instead of running poll loops of their own. A subscriber may also ask to be
called `every` so many seconds without a change.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from jobcore import wakeup
from jobcore.storage import powers

log = logging.getLogger("jobcore.http.waiter")

PUSHED_CHECK = 0.25
"""Seconds between looks at a store that pushes its changes (a look costs nothing there)."""


class ChangeWaiter:
    def __init__(self, storage: Any, wake_key: str, *, interval: float = 0.003) -> None:
        self.storage = storage
        self.wake_key = wake_key
        self.interval = interval
        self.generation = 0
        self._subscribers: list[Callable[[], None]] = []
        self._every: dict[Callable[[], None], float] = {}
        self._cond = threading.Condition()
        self._poked = False  # under _cond
        self._writes: powers.WriteWatch = powers.Polling()  # the thread's: when to look
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hub-waiter", daemon=True)

    def subscribe(self, callback: Callable[[], None], *, every: float | None = None) -> None:
        """Call `callback` on every change (and, with `every`, that often without one)."""
        self._subscribers.append(callback)
        if every is not None:
            self._every[callback] = every

    def poke(self) -> None:
        with self._cond:
            self._poked = True
            self._cond.notify_all()

    def start(self) -> None:
        wakeup.subscribe(self.wake_key, self.poke)
        wakeup.subscribe(wakeup.every_change(self.wake_key), self.poke)
        self._thread.start()

    def stop(self) -> None:
        wakeup.unsubscribe(self.wake_key, self.poke)
        wakeup.unsubscribe(wakeup.every_change(self.wake_key), self.poke)
        self._stop.set()
        self.poke()
        if self._thread.is_alive():
            self._thread.join(5)

    def _run(self) -> None:
        self._writes = powers.write_watch(self.storage, self._cond)
        try:
            self._watch()
        finally:
            self._writes.close()

    def _watch(self) -> None:
        failures = 0
        last_called = dict.fromkeys(self._every, time.monotonic())
        while not self._stop.is_set():
            with self._cond:
                if not self._poked:
                    self._cond.wait(self._timeout(last_called))
                poked, self._poked = self._poked, False
            try:
                changed = self.storage.wait_for_change(0) or poked
                failures = 0
            except Exception as exc:  # the store is unwell: back off, keep going
                failures += 1
                log.warning("checking the store for changes failed: %s", exc)
                self._stop.wait(min(5.0, 0.05 * 2**failures))
                changed = True
            if self._stop.is_set():
                break
            now = time.monotonic()
            if changed:
                self.generation += 1
                due = self._subscribers
            else:
                due = [
                    cb
                    for cb, every in self._every.items()
                    if now - last_called.setdefault(cb, now) >= every
                ]
            last_called.update(dict.fromkeys((cb for cb in due if cb in self._every), now))
            self._call(due)

    def _timeout(self, last_called: dict[Callable[[], None], float]) -> float:
        """How long to wait for a poke (`_cond` held): `interval`, or longer while the
        store pushes its changes or its write watch says nobody writes."""
        now = time.monotonic()
        due = [last_called.get(cb, now) + every - now for cb, every in self._every.items()]
        longest = max(self.interval, min([PUSHED_CHECK, *due]))
        if powers.pushes_changes(self.storage):
            return longest
        return self._writes.look_in(longest, self.interval)

    @staticmethod
    def _call(callbacks: list[Callable[[], None]]) -> None:
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.exception("change subscriber failed")
