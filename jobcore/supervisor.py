"""Deciding, on the worker's loop thread, what the clock and requests mean for held attempts.

Timeouts ask a handler to stop; a handler that outlives its stop grace is left
behind with its fallback outcome; prefetched jobs that waited too long (or all
of them at shutdown) are given back; the shutdown deadline asks running
handlers to stop; a cancel request or a lost lease stops or ends an attempt.
Nothing here touches the store: outcomes go to `record`, ended attempts to
`finish`, both run by the loop's next commit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from jobcore.attempt import AttemptRunner
from jobcore.inflight import Attempt, InFlight, Phase
from jobcore.models import Cancelled, Released

log = logging.getLogger("jobcore.worker")


class Supervisor:
    """Stops, gives back or ends held attempts; see the module docstring."""

    def __init__(
        self,
        inflight: InFlight,
        attempts: AttemptRunner,
        *,
        stop_grace: float,
        prefetch_wait: float,
        record: Callable[[Attempt], None],
        finish: Callable[[Attempt], None],
        replace_executor: Callable[[Attempt], None],
    ) -> None:
        self.inflight = inflight
        self.attempts = attempts
        self.stop_grace = stop_grace
        self.prefetch_wait = prefetch_wait
        self._record = record
        self._finish = finish
        self._replace_executor = replace_executor

    def check_timeouts(self, mono: float) -> None:
        for attempt in self.inflight.in_phase(Phase.STARTED):
            if attempt.deadline is None or mono < attempt.deadline:
                continue
            fallback = self.attempts.timeout_outcome(attempt)
            if self.inflight.stop(attempt, "timeout", fallback, mono + self.stop_grace):
                attempt.duration_ms = (attempt.job.timeout_ms or 0) * 1.0
                log.warning(
                    "job %s (%s) timed out after %gs; its handler was asked to stop "
                    "(it keeps its lease for up to %gs more)",
                    attempt.job.id,
                    attempt.job.type,
                    (attempt.job.timeout_ms or 0) / 1000,
                    self.stop_grace,
                )

    def check_graces(self, mono: float) -> None:
        """Handlers asked to stop that outlived their grace: record the fallback without them."""
        for attempt in self.inflight.in_phase(Phase.STOPPING):
            if attempt.stop_until is None or mono < attempt.stop_until:
                continue
            fallback = attempt.fallback
            moved = self.inflight.try_move(
                attempt, Phase.DONE if fallback is None else Phase.REPORTED, fallback
            )
            if not moved:
                continue  # it reported just now: its own outcome wins
            attempt.replaced = True
            log.warning(
                "job %s: its handler did not stop within %gs of being asked (%s); "
                "leaving its thread behind",
                attempt.job.id,
                self.stop_grace,
                attempt.ctx.stop_reason,
            )
            self._replace_executor(attempt)
            if fallback is None:
                self._finish(attempt)
            else:
                self._record(attempt)

    def check_waiting(self, mono: float, stopping: bool) -> None:
        """Give back prefetched jobs that waited too long, or all of them when stopping."""
        phases = (Phase.CLAIMED, Phase.STARTING) if stopping else (Phase.CLAIMED,)
        for attempt in self.inflight.in_phase(*phases):
            if not stopping and mono - attempt.claimed_at < self.prefetch_wait:
                continue
            if self.inflight.try_move(attempt, Phase.REPORTED, Released(lease=attempt.lease)):
                if not stopping:
                    log.info(
                        "giving back job %s: it waited %.1fs for an executor",
                        attempt.job.id,
                        mono - attempt.claimed_at,
                    )
                self._record(attempt)

    def stop_started(self, mono: float, *, now: bool = False) -> None:
        """The shutdown deadline passed: ask running handlers to stop, release them once they
        did. `now` (a second stop request): without waiting for them (no `stop_grace`)."""
        grace = 0.0 if now else self.stop_grace
        for attempt in self.inflight.in_phase(Phase.STARTED):
            self.inflight.stop(attempt, "shutdown", Released(lease=attempt.lease), mono + grace)
        if now:
            for attempt in self.inflight.in_phase(Phase.STOPPING):
                attempt.stop_until = min(attempt.stop_until or mono, mono)
            self.check_graces(mono)

    def cancel(self, attempt: Attempt) -> None:
        """A cancel was requested: a job not yet started never starts; a running one is asked to stop."""
        if attempt.phase in (Phase.CLAIMED, Phase.STARTING):
            cancelled = Cancelled(lease=attempt.lease, error="cancelled before it started")
            if self.inflight.try_move(attempt, Phase.REPORTED, cancelled):
                log.info(
                    "cancel requested for job %s before it started; it will not run", attempt.job.id
                )
                self._record(attempt)
        elif attempt.phase in (Phase.STARTED, Phase.STOPPING) and attempt.ctx.stop_reason is None:
            log.info("cancel requested for running job %s; asking it to stop", attempt.job.id)
            attempt.ctx.request_stop("cancel")

    def lease_lost(self, attempt: Attempt, mono: float) -> None:
        if attempt.phase is Phase.DONE or attempt.lost:
            return  # recorded meanwhile: the extension found it finished
        attempt.lost = True
        log.error(
            "lost the lease of job %s (lease %s); stopping it",
            attempt.job.id,
            attempt.lease.lease_id,
        )
        if attempt.phase in (Phase.CLAIMED, Phase.STARTING) and self.inflight.try_move(
            attempt, Phase.DONE
        ):
            self._finish(attempt)
        elif attempt.phase is Phase.STARTED:
            self.inflight.stop(attempt, "lease lost", None, mono + self.stop_grace)
        elif attempt.phase is Phase.STOPPING:
            attempt.fallback = None
            attempt.ctx.request_stop("lease lost")
        # reported: its outcome will be answered as stale
