"""The keeper: a worker's thread that extends its leases and sweeps the store.

It runs on its own connection, so heartbeats and the sweep never wait behind
the loop's outcome commits. What it learns about held attempts (a lease lost,
a cancel requested) goes to `news` for the loop to act on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from functools import partial

from jobcore.attempt import describe_error
from jobcore.clockjump import FirstSweep, SweepGuard
from jobcore.inflight import Attempt, InFlight, Phase
from jobcore.notifier import Notifier
from jobcore.queue import Queue
from jobcore.storage.base import Claim

log = logging.getLogger("jobcore.worker")

MAX_DB_BACKOFF = 30.0


class Keeper:
    """Extends the leases of held attempts every lease/4 and sweeps every lease/2.

    Leases expire by the store's clock: when it steps ahead of elapsed time by more
    than lease/4, every live lease in the store may look expired. The keeper then
    extends its own leases at once and sweeps only one lease period later, so every
    worker has renewed its leases before anyone re-queues their jobs. A step just before
    this keeper's first reading of the clock goes unseen: its first sweep looks, and
    reclaims what it saw expired only `confirm_wait` (lease/4 + 1s) later, if unchanged.
    """

    def __init__(
        self,
        queue: Queue,
        inflight: InFlight,
        cond: threading.Condition,
        *,
        lease: float,
        notifier: Notifier,
        wake: Callable[[], None],
    ) -> None:
        self.queue = queue
        self.inflight = inflight
        self._cond = cond
        self.lease = lease
        self._notifier = notifier
        self._wake = wake
        self.news: list[tuple[Attempt, str]] = []  # ("lost" | "cancel"), under the worker's cond
        self.swept_once = False  # the first sweep ran (or failed)
        self._event = threading.Event()  # heartbeat requested, or stop
        self._asked = False  # a heartbeat was requested (ctx.heartbeat) and not yet served
        self._stop = False
        self._first_sweep = FirstSweep(self.lease, log)
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._main, name="jobcore-keeper", daemon=True)
        self._thread.start()

    def stop(self, timeout: float) -> None:
        self._stop = True
        self._event.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)

    def request_heartbeat(self) -> None:
        """Extend this worker's leases soon: at once, or lease/20 after the last extension
        (requests coalesce; a handler may call `ctx.heartbeat()` for every item it does)."""
        if not self._asked:  # one pending request wakes the keeper; more add nothing
            self._asked = True
            self._event.set()

    def _main(self) -> None:
        lease_s = self.lease
        next_heartbeat = time.monotonic() + lease_s / 4
        next_sweep = time.monotonic()
        retry_at = float("-inf")  # after a database error: no database work before this
        extended = float("-inf")  # when leases were last extended
        coalesce = lease_s / 20  # requested heartbeats: at most one extension per lease/20
        backoff = 0.0
        guard = SweepGuard(self.queue.storage.now, lease_s, logger=log)
        while not self._stop:
            self._event.clear()  # what woke it is in `_asked` / `_stop` / the times below
            mono = time.monotonic()
            if mono >= retry_at:
                try:
                    stepped = guard.check("extending this worker's leases now and ")
                    if stepped:
                        next_sweep = max(next_sweep, guard.held_until)
                    asked = self._asked and mono >= extended + coalesce
                    if stepped or asked or mono >= next_heartbeat:
                        self._asked = False  # a request from now on is served next time
                        extended = mono
                        self._extend_leases()
                        next_heartbeat = mono + lease_s / 4
                    if mono >= next_sweep:
                        # look again right before sweeping: a step while this turn ran (or
                        # while the process was stopped in it) holds this sweep too
                        if guard.check("extending this worker's leases now and "):
                            self._extend_leases()
                            next_sweep = max(next_sweep, guard.held_until)
                        else:
                            next_sweep = mono + self._sweep_turn()
                    backoff = 0.0
                except Exception as exc:
                    self.swept_once = True
                    backoff = min(MAX_DB_BACKOFF, lease_s / 4, max(0.05, backoff * 2))
                    log.error(
                        "database error extending leases or sweeping (%s); retrying in %.1fs",
                        describe_error(exc),
                        backoff,
                    )
                    # nothing before then: a heartbeat or sweep already due must not be
                    # retried at once (it was: the keeper spun on a full disk)
                    retry_at = mono + backoff
            if self._stop:
                return
            due = min(next_heartbeat, next_sweep)
            if self._asked:  # a request came: served lease/20 after the last extension
                due = min(due, extended + coalesce)
            self._event.wait(max(0.0, max(due, retry_at) - time.monotonic()))

    def _extend_leases(self) -> None:
        with self._cond:
            held = [a for a in self.inflight if a.phase is not Phase.DONE and not a.lost]
        if not held:
            return
        owned = self.queue.storage.extend_leases(
            [attempt.lease for attempt in held], lease_ms=int(self.lease * 1000)
        )
        news = [
            (attempt, "lost" if attempt.job.id not in owned else "cancel")
            for attempt in held
            if attempt.job.id not in owned or owned[attempt.job.id]
        ]
        if news:
            with self._cond:
                self.news.extend(news)
                self._cond.notify_all()

    def _sweep_turn(self) -> float:
        """Sweep, or look first (`FirstSweep`); answer the seconds until the next sweep."""
        wait = self._first_sweep.wait(self.queue.expired_claims)
        if wait:
            return wait
        self._sweep(self._first_sweep.only())
        return self.lease / 2

    def _sweep(self, only: list[Claim] | None = None) -> None:
        # Hold the store's sweep lock for one interval: if this worker dies, another
        # worker takes the sweep over within that time.
        swept = self.queue.storage.sweep(hold_ms=int(self.lease * 500), only=only)
        if swept:
            self._notifier.put([partial(self.queue.announce_swept, item) for item in swept])
        if not self.swept_once or any(item.action in ("reclaimed", "released") for item in swept):
            self.swept_once = True  # until_empty: jobs of dead workers count as runnable
            self._wake()
