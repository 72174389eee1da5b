"""Hook notifications of a worker, run on one thread in commit order.

A slow or failing observer never holds up claims or outcome commits: the
loop collects the notifications of one iteration and hands them over after
its commit; the notifier thread calls them one after another.
"""

from __future__ import annotations

import logging
import queue as stdqueue
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

import pluggy

from jobcore.plugins import notify

log = logging.getLogger("jobcore.worker")


class Notifier:
    """Collects notifications per loop iteration and runs them on its own thread."""

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self.pm = pm
        self._notices: stdqueue.SimpleQueue[list[Callable[[], None]] | None] = (
            stdqueue.SimpleQueue()
        )
        self._batch: list[Callable[[], None]] = []  # notifications of the current iteration
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._main, name="jobcore-notifier", daemon=True)
        self._thread.start()

    def announce(self, hook_name: str, **kwargs: Any) -> None:
        """Queue a notification; `flush` hands the batch to the notifier thread."""
        self._batch.append(partial(notify, self.pm, hook_name, **kwargs))

    def flush(self) -> None:
        if self._batch:
            self._notices.put(self._batch)
            self._batch = []

    def put(self, calls: list[Callable[[], None]]) -> None:
        """Hand calls straight to the notifier thread (from a thread other than the loop's)."""
        self._notices.put(calls)

    def stop(self, timeout: float = 10) -> None:
        """Flush, let the thread run what it was given, and end it."""
        self.flush()
        self._notices.put(None)
        if self._thread is not None:
            self._thread.join(timeout=timeout)

    def _main(self) -> None:
        while True:
            calls = self._notices.get()
            if calls is None:
                return
            for call in calls:
                try:
                    call()
                except BaseException:  # notify() already isolates hooks; this is a last guard
                    log.exception("notification failed")
