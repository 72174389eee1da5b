"""Noticing a forward step of the store's clock (leases expire by it, not by elapsed time)."""

from __future__ import annotations

import time
from collections.abc import Callable


class ClockJumps:
    """Compares the store clock's advance (ms) with this process's monotonic advance.

    `check()` answers how far the store clock ran ahead of real elapsed time since
    the previous check, when that is more than `tolerance_ms`, else 0. A step back
    is not reported: it only makes leases last longer.
    """

    def __init__(
        self,
        store_clock: Callable[[], int],
        tolerance_ms: int,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store_clock = store_clock
        self._monotonic = monotonic
        self.tolerance_ms = tolerance_ms
        self._last: tuple[int, float] | None = None

    def check(self) -> int:
        wall, mono = self._store_clock(), self._monotonic()
        last, self._last = self._last, (wall, mono)
        if last is None:
            return 0
        ahead = (wall - last[0]) - (mono - last[1]) * 1000
        return int(ahead) if ahead > self.tolerance_ms else 0
