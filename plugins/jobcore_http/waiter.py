"""One change waiter per hub process: notices commits by any process on the store.

A single thread asks the store whether another connection committed
(`Storage.wait_for_change`, SQLite: `PRAGMA data_version`) every
`interval`, and is poked at once by commits in this process (`jobcore.wakeup`).
Every change calls each subscriber once; long-polls and event streams wait on
it instead of running poll loops of their own.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from jobcore import wakeup

log = logging.getLogger("jobcore.http.waiter")


class ChangeWaiter:
    def __init__(self, storage: Any, wake_key: str, *, interval: float = 0.003) -> None:
        self.storage = storage
        self.wake_key = wake_key
        self.interval = interval
        self.generation = 0
        self._subscribers: list[Callable[[], None]] = []
        self._poke = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hub-waiter", daemon=True)

    def subscribe(self, callback: Callable[[], None]) -> None:
        self._subscribers.append(callback)

    def poke(self) -> None:
        self._poke.set()

    def start(self) -> None:
        wakeup.subscribe(self.wake_key, self.poke)
        self._thread.start()

    def stop(self) -> None:
        wakeup.unsubscribe(self.wake_key, self.poke)
        self._stop.set()
        self._poke.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            poked = self._poke.wait(self.interval)
            self._poke.clear()
            try:
                changed = self.storage.wait_for_change(0) or poked
                failures = 0
            except Exception as exc:  # the store is unwell: back off, keep going
                failures += 1
                log.warning("checking the store for changes failed: %s", exc)
                self._stop.wait(min(5.0, 0.05 * 2**failures))
                changed = True
            if changed and not self._stop.is_set():
                self.generation += 1
                for callback in self._subscribers:
                    try:
                        callback()
                    except Exception:
                        log.exception("change subscriber failed")
