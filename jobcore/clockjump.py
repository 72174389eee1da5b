"""Noticing a forward step of the store's clock (leases expire by it, not by elapsed time)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jobcore.storage.base import Claim

log = logging.getLogger("jobcore")


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


def confirm_wait(lease_s: float) -> float:
    """How long a sweeper without an earlier reading of the store's clock waits between
    seeing leases expired and reclaiming those still unchanged: lease/4 + 1s, by when a
    live worker's keeper (heartbeating every lease/4) has extended them, step or not."""
    return lease_s / 4 + 1


class FirstSweep:
    """The first sweep of a periodic sweeper (a worker's keeper, the hub): a step of the
    store's clock just before its `SweepGuard`'s first reading makes live leases look
    expired, so it looks first and reclaims what it saw only if still so `confirm_wait`
    later, as `jobcore sweep` does; every later sweep is a plain one."""

    def __init__(self, lease_s: float, logger: logging.Logger = log) -> None:
        self._lease_s = lease_s
        self._log = logger
        self._looked = False
        self._confirming: list[Claim] | None = None

    def wait(self, expired_claims: Callable[[], list[Claim]]) -> float:
        """Seconds to wait before sweeping (the first time, when leases look expired);
        0: sweep now, what `only()` names."""
        if self._looked:
            return 0.0
        self._looked = True
        expired = expired_claims()
        if not expired:
            return 0.0
        self._confirming = expired
        seconds = confirm_wait(self._lease_s)
        self._log.info(
            "%d lease(s) look expired; reclaiming those still so in %.1fs (a live worker "
            "extends its leases by then)",
            len(expired),
            seconds,
        )
        return seconds

    def only(self) -> list[Claim] | None:
        """The claims this sweep may reclaim: those seen expired, once; then None (all)."""
        confirming, self._confirming = self._confirming, None
        return confirming


class SweepGuard:
    """When a periodic sweeper may sweep, given forward steps of the store's clock.

    A step of the store clock ahead of elapsed time by more than lease/4 may make
    every live lease look expired. After one, no sweep until one lease of real
    elapsed time has passed: by then every live worker has extended its leases
    (its keeper heartbeats every lease/4, and at once when it notices the step).
    The first `check()` takes the first reading: a step before it goes unnoticed, so
    the first sweep after it confirms what it found expired (`confirm_wait`).
    """

    def __init__(
        self,
        store_clock: Callable[[], int],
        lease_s: float,
        monotonic: Callable[[], float] = time.monotonic,
        logger: logging.Logger = log,
    ) -> None:
        self.lease_s = lease_s
        self._log = logger
        self._monotonic = monotonic
        self._jumps = ClockJumps(store_clock, tolerance_ms=int(lease_s * 250), monotonic=monotonic)
        self.held_until = float("-inf")  # monotonic time before which no sweep

    def check(self, doing: str = "") -> int:
        """Look at the store's clock; on a forward step log it, hold sweeps for one
        lease and answer the step (ms), else 0. `doing`: what the caller does at once."""
        ahead_ms = self._jumps.check()
        if ahead_ms:
            self.held_until = self._monotonic() + self.lease_s
            self._log.warning(
                "the store's clock stepped %.1fs ahead of elapsed time; %ssweeping in %.1fs, "
                "not before",
                ahead_ms / 1000,
                doing,
                self.lease_s,
            )
        return ahead_ms

    def may_sweep(self) -> bool:
        """No forward step was noticed within the last lease (of elapsed time)."""
        return self._monotonic() >= self.held_until
