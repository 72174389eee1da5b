"""The life of each attempt a worker holds, from its claim until its outcome is committed.

    claimed ──► starting ──► started ──► reported ──► done     the usual path
       │           │            │            ▲
       │           │            └► stopping ─┘        timeout, shutdown or lost lease: the
       │           │                                  handler was asked to stop; what it reports
       │           │                                  replaces the `fallback`, recorded after
       │           │                                  `stop_grace`
       └───────────┴───────────────► reported          released or cancelled before it ran

An executor that takes an attempt moves it to `starting`, and its handler
begins (`started`) only once its start is recorded where the sweep looks: in
the executor's start slot (`jobcore.start_slots`, stores on this machine's
disk: `self_noting`), or else by the loop's next group commit (a start
marker). So a handler that takes its worker down (SIGKILL, the OOM killer)
always costs its job an attempt, while a job that waited for an executor
(prefetched) and never began costs nothing (DESIGN §6, crash accounting).

An attempt is `done` once its outcome is committed or there is nothing left to
record (its lease was lost: claimed, starting, started or stopping go straight
to done). The loop thread owns every move but two: an executor asks to begin an
attempt (refused unless it is still `claimed`) and to start it once marked, and
reports what its handler did (dropped unless the attempt is `started` or
`stopping`). All of it happens under one lock, so no report can be overtaken by
a release or a timeout the loop decided at the same moment, nor the other way
round.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from jobcore.context import JobContext
from jobcore.models import Job, Lease, Outcome


class Phase(enum.Enum):
    CLAIMED = "claimed"  # waiting for an executor (prefetched)
    STARTING = "starting"  # an executor took it; waits for its start marker to commit
    STARTED = "started"  # its handler runs
    STOPPING = "stopping"  # its handler was asked to stop; `fallback` is recorded if it does not
    REPORTED = "reported"  # `outcome` decided, waiting to be committed
    DONE = "done"  # committed, or nothing to record; out of the table

    # Members are singletons: hashing by identity is right, and unlike Enum's own
    # __hash__ it is not a Python call (every move looks phases up in MOVES).
    __hash__ = object.__hash__


MOVES: dict[Phase, frozenset[Phase]] = {
    Phase.CLAIMED: frozenset({Phase.STARTING, Phase.REPORTED, Phase.DONE}),
    Phase.STARTING: frozenset({Phase.STARTED, Phase.REPORTED, Phase.DONE}),
    Phase.STARTED: frozenset({Phase.STOPPING, Phase.REPORTED, Phase.DONE}),
    Phase.STOPPING: frozenset({Phase.REPORTED, Phase.DONE}),
    Phase.REPORTED: frozenset({Phase.DONE}),
    Phase.DONE: frozenset(),
}


class IllegalMove(RuntimeError):
    """A move the table does not allow: a bug in the worker, never a job's fault."""


@dataclass(eq=False)
class Attempt:
    """One claim of one job by this worker."""

    job: Job
    lease: Lease
    ctx: JobContext
    claimed_at: float  # monotonic seconds
    phase: Phase = Phase.CLAIMED
    outcome: Outcome | None = None  # what to record, once reported
    fallback: Outcome | None = None  # recorded if the handler does not stop within its grace
    stop_until: float | None = None  # monotonic end of that grace
    deadline: float | None = None  # monotonic: its timeout, counted from the start
    began_at: float = 0.0  # monotonic, when an executor began it
    duration_ms: float = 0.0
    start_marked: bool = False  # its start marker committed: the handler may begin
    waiter: threading.Event | None = None  # set when a `starting` attempt may go on or is gone
    lost: bool = False  # its lease is gone: nothing it reports can be recorded
    replaced: bool = False  # its executor was given up on; a fresh thread took the slot
    entry: int | None = None  # the start-slot entry naming it, freed once it is done

    @property
    def ran(self) -> bool:
        """Whether a handler began (it counts as a finished attempt when it leaves)."""
        return self.began_at > 0.0


class InFlight:
    """The worker's attempts by job id, and the moves between phases.

    `cond` is the worker's condition: executors' begin and report run under
    it and notify it, so the loop wakes for every report. `lock`, when given,
    is `cond`'s own lock: entering it directly is cheaper than entering `cond`.
    """

    def __init__(
        self, cond: threading.Condition, lock: AbstractContextManager[Any] | None = None
    ) -> None:
        self._cond = cond
        self._lock: AbstractContextManager[Any] = cond if lock is None else lock
        self._attempts: dict[str, Attempt] = {}
        self._inbox: list[Attempt] = []  # reported by executors since the loop last looked
        self._began: list[Attempt] = []  # taken by executors, start marker not yet asked for
        # Executors record starts themselves (start slots): no marker from the loop unless
        # an executor asks for one (`needs_marker`). `free_entry` takes back the start-slot
        # entry of an attempt that is done (recorded, or its lease lost), never before.
        self.self_noting = False
        self.free_entry: Callable[[int], None] | None = None
        # `clear_entry` blanks one as well: its attempt was given back before it began
        self.clear_entry: Callable[[int], None] | None = None

    # -- executors -------------------------------------------------------------------

    def begin(self, attempt: Attempt, waiter: threading.Event) -> bool:
        """claimed -> starting (the loop's next commit marks it), unless the loop released or
        cancelled it meanwhile. `waiter` is set when `start` may answer differently."""
        with self._lock:
            if not self._begin(attempt, waiter):
                return False
            self._cond.notify_all()
        return True

    def start(self, attempt: Attempt) -> bool | None:
        """starting -> started once its start marker committed: True, run the handler;
        None, not yet (wait for `waiter`); False, the loop gave it back or it was lost."""
        with self._lock:
            if attempt.phase is not Phase.STARTING:
                return False
            if not attempt.start_marked:
                return None
            self._move(attempt, Phase.STARTED)
            attempt.began_at = time.monotonic()
            if attempt.job.timeout_ms is not None:  # the timeout counts from the start
                attempt.deadline = attempt.began_at + attempt.job.timeout_ms / 1000
        return True

    def report(
        self,
        attempt: Attempt,
        outcome: Outcome,
        then: Attempt | None = None,
        waiter: threading.Event | None = None,
    ) -> tuple[bool, bool]:
        """The handler finished: (reported, `then` begun). Not reported when the loop already
        gave up on it (late report). `then`, the executor's next attempt, is begun in the same
        step, so its start marker rides in the commit that records this outcome."""
        with self._lock:
            if attempt.phase not in (Phase.STARTED, Phase.STOPPING):
                return False, False
            attempt.duration_ms = (time.monotonic() - attempt.began_at) * 1000
            if attempt.lost:
                self._move(attempt, Phase.DONE)
            else:
                self._move(attempt, Phase.REPORTED)
                attempt.outcome = outcome
            self._inbox.append(attempt)
            begun = then is not None and waiter is not None and self._begin(then, waiter)
            self._cond.notify_all()
            return True, begun

    def _begin(self, attempt: Attempt, waiter: threading.Event) -> bool:
        if attempt.phase is not Phase.CLAIMED:
            return False
        self._move(attempt, Phase.STARTING)
        attempt.waiter = waiter
        if not self.self_noting:
            self._began.append(attempt)
        return True

    def noted(self, attempt: Attempt, entry: int) -> None:
        """Its executor recorded its start in start-slot `entry`: the handler may begin."""
        with self._lock:
            if attempt.phase is Phase.STARTING:
                attempt.start_marked = True
                attempt.entry = entry
                return
        if self.clear_entry is not None:  # given back or lost meanwhile: it never begins,
            self.clear_entry(entry)  # and no crash before its release commits charges it

    def needs_marker(self, attempt: Attempt) -> None:
        """Its start slot could not be written: the loop's next commit marks it instead."""
        with self._lock:
            if attempt.phase is Phase.STARTING and not attempt.start_marked:
                self._began.append(attempt)
                self._cond.notify_all()

    # -- the loop ------------------------------------------------------------------------

    def add(self, attempt: Attempt) -> None:
        with self._lock:
            self._attempts[attempt.job.id] = attempt

    def get(self, job_id: str) -> Attempt | None:
        return self._attempts.get(job_id)

    def move(self, attempt: Attempt, phase: Phase, outcome: Outcome | None = None) -> None:
        """A move the loop decided; `outcome` goes with `reported`."""
        with self._lock:
            self._move(attempt, phase)
            if phase is Phase.REPORTED:
                attempt.outcome = outcome

    def try_move(self, attempt: Attempt, phase: Phase, outcome: Outcome | None = None) -> bool:
        """Like `move`, but False (nothing changed) when the table forbids it right now."""
        with self._lock:
            if phase not in MOVES[attempt.phase]:
                return False
            self._move(attempt, phase)
            if phase is Phase.REPORTED:
                attempt.outcome = outcome
            return True

    def stop(self, attempt: Attempt, reason: str, fallback: Outcome | None, until: float) -> bool:
        """started -> stopping: ask the handler to stop; record `fallback` if it has not by `until`."""
        with self._lock:
            if attempt.phase is not Phase.STARTED:
                return False
            self._move(attempt, Phase.STOPPING)
            attempt.fallback = fallback
            attempt.stop_until = until
            attempt.deadline = None
        attempt.ctx.request_stop(reason)
        return True

    def remove(self, attempt: Attempt) -> None:
        """It is done: its outcome committed, or nothing is left to record."""
        with self._lock:
            if attempt.phase is not Phase.DONE:
                self._move(attempt, Phase.DONE)
            if self._attempts.get(attempt.job.id) is attempt:
                del self._attempts[attempt.job.id]
            entry, attempt.entry = attempt.entry, None
        if entry is not None and self.free_entry is not None:
            self.free_entry(entry)

    def take_inbox(self) -> list[Attempt]:
        """Attempts executors reported since the last call (caller holds the lock)."""
        inbox, self._inbox = self._inbox, []
        return inbox

    def take_began(self) -> list[Attempt]:
        """Attempts taken by executors since the last call, to mark (caller holds the lock)."""
        began, self._began = self._began, []
        return began

    def marked(self, attempts: list[Attempt], held: set[str] | None) -> list[Attempt]:
        """Their start markers committed: their handlers may begin. Returns those whose
        marker did not take (`held`, when the store tells, lacks them): their lease is gone."""
        lost: list[Attempt] = []
        with self._lock:
            for attempt in attempts:
                if attempt.phase is not Phase.STARTING:
                    continue
                if held is not None and attempt.job.id not in held:
                    lost.append(attempt)
                    continue
                attempt.start_marked = True
                if attempt.waiter is not None:
                    attempt.waiter.set()
        return lost

    def has_news(self) -> bool:
        """Reports wait for the loop (caller holds the lock)."""
        return bool(self._inbox)

    def released_since(self, since: float) -> bool:
        """Handlers allowed to begin by a commit that ended at `since` have not all reported."""
        with self._lock:
            return any(
                attempt.start_marked
                if attempt.phase is Phase.STARTING
                else attempt.began_at >= since
                for attempt in self._attempts.values()
                if attempt.phase is Phase.STARTING or attempt.phase is Phase.STARTED
            )

    def has_began(self) -> bool:
        """Executors took attempts whose start the loop has not taken yet (caller holds the lock)."""
        return bool(self._began)

    def waiting(self) -> int:
        """Claimed attempts no executor took yet (prefetched)."""
        return sum(1 for attempt in self._attempts.values() if attempt.phase is Phase.CLAIMED)

    def in_phase(self, *phases: Phase) -> list[Attempt]:
        return [attempt for attempt in self._attempts.values() if attempt.phase in phases]

    def __iter__(self) -> Iterator[Attempt]:
        return iter(list(self._attempts.values()))

    def __len__(self) -> int:
        return len(self._attempts)

    def _move(self, attempt: Attempt, phase: Phase) -> None:
        if phase not in MOVES[attempt.phase]:
            raise IllegalMove(
                f"attempt of job {attempt.job.id}: {attempt.phase.value} -> {phase.value}"
            )
        was, attempt.phase = attempt.phase, phase
        if was is Phase.STARTING and phase is not Phase.STARTED and attempt.waiter is not None:
            attempt.waiter.set()  # given back, cancelled or lost before it began: its executor moves on


__all__ = ["MOVES", "Attempt", "IllegalMove", "InFlight", "Phase"]
