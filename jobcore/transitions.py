"""The job state machine (DESIGN §4), defined once for every backend.

Each `Transition` says, in backend-neutral terms, what one guarded statement
does to a job row: which statuses it starts from, what else must hold (the
guard), the status it leaves, what happens to attempts, run_at, the lease,
the error list, the attempt history and `cancel_requested`, and which event
kind it appends. Backends generate their statements from this table (see
`jobcore.storage.sqlite_statements`); `apply` is the reference
implementation in Python, used to derive a recorded row without reading it
back and by `jobcore.testing.StorageContract` to check every rule.

An outcome maps to one transition, or two whose guards exclude each other
on `cancel_requested`: a cancel request is honoured by every later
transition (a released or retried job with a pending cancel request ends
`cancelled`). A transition whose guard does not hold changes nothing.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any

from jobcore.models import (
    FIELD_INDEX,
    Cancelled,
    Completed,
    Failed,
    Job,
    JobStatus,
    Outcome,
    Released,
    Retrying,
    job_from_values,
    job_values,
)

DEFAULT_MAX_RETRY_DELAY_MS = 7 * 86_400_000
"""Default bound of a retry delay (`max_retry_delay`, 7 days)."""

STORE_MAX_DELAY_MS = 100 * 365 * 86_400_000
"""Hard bound backends apply to any delay, so no value yields a time the store cannot hold."""

LEASE_EXPIRED = "lease expired"

OUTCOME_ERROR = "<the outcome's error>"
"""Marker for `Transition.error`: the error text comes from the reported outcome."""


class Attempts(enum.Enum):
    KEEP = "keep"
    INCREMENT = "increment"  # a claim counts the attempt
    GIVE_BACK = "give back"  # the claim ended without running (or was stopped): attempts - 1
    RESET = "reset"  # operator retry: 0


class RunAt(enum.Enum):
    KEEP = "keep"
    NOW = "now"
    AFTER_DELAY = "after delay"  # store now + the outcome's delay_ms


class Lock(enum.Enum):
    """What happens to the claim columns (locked_by, locked_at, lease, heartbeat, lease_id)."""

    KEEP = "keep"
    CLAIM = "claim"  # new lease_id, locked_by = worker, locked_at = claimed_at = heartbeat = now
    EXTEND = "extend"  # heartbeat = now, lease_expires_at = now + lease_ms
    END_KEEP_WORKER = "end, keep worker"  # finished: locked_by and lease_id stay as a record
    END_CLEAR_WORKER = "end, clear worker"  # waiting again: locked_by cleared, lease_id kept


class Started(enum.Enum):
    KEEP = "keep"
    NOW = "now"  # only if not set yet
    CLEAR = "clear"
    CLAIM = "set by the claim"  # now for jobs that start at once, NULL for prefetched ones


class Cancel(enum.Enum):
    KEEP = "keep"
    REQUEST = "request"
    CLEAR = "clear"


RETRY_TARGET = "scheduled or pending"
"""`Transition.to_status` of a retry: `scheduled` when delay_ms > 0, else `pending`."""


@dataclass(frozen=True, slots=True)
class Guard:
    """What must hold, besides the status, for a transition to apply (None: don't care)."""

    fenced: bool = False  # lease_id and locked_by = the reporter's (owner transitions)
    lease_expired: bool = False  # lease_expires_at < now (sweep)
    due: bool = False  # run_at <= now (promotion)
    started: bool | None = None  # started_at IS NOT NULL
    attempts_left: bool | None = None  # attempts < max_attempts
    cancel_requested: bool | None = None

    def holds(
        self, job: Job, *, now: int, lease_id: str | None = None, worker: str | None = None
    ) -> bool:
        """The Python reading of the guard, for a job already in a `from_status`.

        A fence needs both the claim's `lease_id` and its worker: the lease id is
        visible to readers, so it alone must not let one worker act on another's claim.
        """
        if self.fenced and (job.lease_id != lease_id or job.locked_by != worker):
            return False
        if self.lease_expired and not (
            job.lease_expires_at is not None and job.lease_expires_at < now
        ):
            return False
        if self.due and job.run_at > now:
            return False
        if self.started is not None and (job.started_at is not None) != self.started:
            return False
        if self.attempts_left is not None and (job.attempts < job.max_attempts) != (
            self.attempts_left
        ):
            return False
        return self.cancel_requested is None or job.cancel_requested == self.cancel_requested


@dataclass(frozen=True, slots=True)
class Transition:
    """One guarded change of a job row. See the module docstring."""

    name: str
    from_status: tuple[JobStatus, ...]
    to_status: JobStatus | str  # a status, or RETRY_TARGET
    guard: Guard = Guard()
    attempts: Attempts = Attempts.KEEP
    run_at: RunAt = RunAt.KEEP
    lock: Lock = Lock.KEEP
    started: Started = Started.KEEP
    cancel: Cancel = Cancel.KEEP
    error: str | None = None  # OUTCOME_ERROR, a fixed text, or None
    error_entry: bool = False  # append {attempt, error, worker, at} to `errors`
    last_error: bool = False  # last_error = error
    history: str | None = None  # append an attempt-history entry with this outcome
    finishes: bool = False  # completed_at = now
    stores_result: bool = False
    reopens: bool = False  # completed_at and result cleared (operator retry)
    event: str | None = None  # kind of the event appended, None for none

    @property
    def owner(self) -> bool:
        """Reported by the claim's holder and fenced by its lease_id and worker."""
        return self.guard.fenced

    def applies(
        self, job: Job, *, now: int, lease_id: str | None = None, worker: str | None = None
    ) -> bool:
        return job.status in self.from_status and self.guard.holds(
            job, now=now, lease_id=lease_id, worker=worker
        )


_C = JobStatus.CLAIMED

# -- claims and waiting -------------------------------------------------------------------

PROMOTE = Transition(
    "promote", (JobStatus.SCHEDULED,), JobStatus.PENDING, Guard(due=True)
)  # no event: promotion is bulk and says nothing a watcher needs
CLAIM = Transition(
    "claim",
    (JobStatus.PENDING,),
    _C,
    attempts=Attempts.INCREMENT,
    lock=Lock.CLAIM,
    started=Started.CLAIM,
    event="job:claimed",
)
EXTEND = Transition("extend", (_C,), _C, Guard(fenced=True), lock=Lock.EXTEND)
MARK_STARTED = Transition("mark_started", (_C,), _C, Guard(fenced=True), started=Started.NOW)

# -- owner outcomes ------------------------------------------------------------------------

COMPLETE = Transition(
    "complete",
    (_C,),
    JobStatus.COMPLETED,
    Guard(fenced=True),
    lock=Lock.END_KEEP_WORKER,
    history="completed",
    finishes=True,
    stores_result=True,
    event="job:completed",
)
RETRY = Transition(
    "retry",
    (_C,),
    RETRY_TARGET,
    Guard(fenced=True, cancel_requested=False),
    run_at=RunAt.AFTER_DELAY,
    lock=Lock.END_CLEAR_WORKER,
    started=Started.CLEAR,
    error=OUTCOME_ERROR,
    error_entry=True,
    last_error=True,
    history="retrying",
    event="job:retrying",
)
RETRY_CANCELLED = Transition(
    "retry_cancelled",
    (_C,),
    JobStatus.CANCELLED,
    Guard(fenced=True, cancel_requested=True),
    lock=Lock.END_KEEP_WORKER,
    error=OUTCOME_ERROR,
    error_entry=True,
    last_error=True,
    history="cancelled",
    finishes=True,
    event="job:cancelled",
)
FAIL = Transition(
    "fail",
    (_C,),
    JobStatus.FAILED,
    Guard(fenced=True),
    lock=Lock.END_KEEP_WORKER,
    error=OUTCOME_ERROR,
    error_entry=True,
    last_error=True,
    history="failed",
    finishes=True,
    event="job:failed",
)
RELEASE = Transition(
    "release",
    (_C,),
    JobStatus.PENDING,
    Guard(fenced=True, cancel_requested=False),
    attempts=Attempts.GIVE_BACK,
    lock=Lock.END_CLEAR_WORKER,
    started=Started.CLEAR,
    history="released",
    event="job:released",
)
RELEASE_CANCELLED = Transition(
    "release_cancelled",
    (_C,),
    JobStatus.CANCELLED,
    Guard(fenced=True, cancel_requested=True),
    attempts=Attempts.GIVE_BACK,
    lock=Lock.END_KEEP_WORKER,
    error="cancelled",
    last_error=True,
    history="cancelled",
    finishes=True,
    event="job:cancelled",
)
CANCEL_OWNED = Transition(
    "cancel_owned",
    (_C,),
    JobStatus.CANCELLED,
    Guard(fenced=True),
    lock=Lock.END_KEEP_WORKER,
    error=OUTCOME_ERROR,
    last_error=True,
    history="cancelled",
    finishes=True,
    event="job:cancelled",
)

FAIL_UNRECORDABLE = Transition(
    "fail_unrecordable",
    (_C,),
    JobStatus.FAILED,
    Guard(fenced=True),
    lock=Lock.END_KEEP_WORKER,
    error=OUTCOME_ERROR,
    last_error=True,
    finishes=True,
    event="job:failed",
)
"""Last resort when even `fail` cannot be stored (e.g. a corrupt `errors` or `history` value):
touches no JSON column, so one damaged row never blocks a batch."""

# -- the sweep: expired leases (guards exclude each other) ----------------------------------

SWEEP_CANCEL = Transition(
    "sweep_cancel",
    (_C,),
    JobStatus.CANCELLED,
    Guard(lease_expired=True, cancel_requested=True),
    lock=Lock.END_KEEP_WORKER,
    error="cancelled (lease expired)",
    last_error=True,
    history="cancelled",
    finishes=True,
    event="job:cancelled",
)
SWEEP_RELEASE = Transition(
    "sweep_release",
    (_C,),
    JobStatus.PENDING,
    Guard(lease_expired=True, cancel_requested=False, started=False),
    attempts=Attempts.GIVE_BACK,
    lock=Lock.END_CLEAR_WORKER,
    started=Started.CLEAR,
    history="released",
    event="job:released",
)
SWEEP_FAIL = Transition(
    "sweep_fail",
    (_C,),
    JobStatus.FAILED,
    Guard(lease_expired=True, cancel_requested=False, started=True, attempts_left=False),
    lock=Lock.END_KEEP_WORKER,
    error=LEASE_EXPIRED,
    error_entry=True,
    last_error=True,
    history="failed",
    finishes=True,
    event="job:failed",
)
SWEEP_RECLAIM = Transition(
    "sweep_reclaim",
    (_C,),
    JobStatus.PENDING,
    Guard(lease_expired=True, cancel_requested=False, started=True, attempts_left=True),
    lock=Lock.END_CLEAR_WORKER,
    started=Started.CLEAR,
    error=LEASE_EXPIRED,
    error_entry=True,
    last_error=True,
    history="reclaimed",
    event="job:reclaimed",
)

# -- operators ----------------------------------------------------------------------------

OPERATOR_RETRY = Transition(
    "operator_retry",
    (JobStatus.FAILED, JobStatus.CANCELLED),
    JobStatus.PENDING,
    attempts=Attempts.RESET,
    run_at=RunAt.NOW,
    started=Started.CLEAR,
    cancel=Cancel.CLEAR,
    reopens=True,
    event="job:pending",
)
CANCEL_WAITING = Transition(
    "cancel_waiting",
    (JobStatus.SCHEDULED, JobStatus.PENDING),
    JobStatus.CANCELLED,
    finishes=True,
    event="job:cancelled",
)
REQUEST_CANCEL = Transition("request_cancel", (_C,), _C, cancel=Cancel.REQUEST)

OWNER: dict[type[Any], tuple[Transition, ...]] = {
    Completed: (COMPLETE,),
    Retrying: (RETRY, RETRY_CANCELLED),
    Failed: (FAIL,),
    Released: (RELEASE, RELEASE_CANCELLED),
    Cancelled: (CANCEL_OWNED,),
}
"""Each outcome's transitions, tried in order; their guards exclude each other."""

SWEEP: tuple[tuple[Transition, str], ...] = (
    (SWEEP_CANCEL, "cancelled"),
    (SWEEP_RELEASE, "released"),
    (SWEEP_FAIL, "failed"),
    (SWEEP_RECLAIM, "reclaimed"),
)
"""The sweep's transitions with the `Swept.action` each reports."""

ALL: tuple[Transition, ...] = (
    PROMOTE,
    CLAIM,
    EXTEND,
    MARK_STARTED,
    COMPLETE,
    RETRY,
    RETRY_CANCELLED,
    FAIL,
    RELEASE,
    RELEASE_CANCELLED,
    CANCEL_OWNED,
    FAIL_UNRECORDABLE,
    SWEEP_CANCEL,
    SWEEP_RELEASE,
    SWEEP_FAIL,
    SWEEP_RECLAIM,
    OPERATOR_RETRY,
    CANCEL_WAITING,
    REQUEST_CANCEL,
)

EVENT_KINDS = (
    "job:enqueued",
    "job:claimed",
    "job:completed",
    "job:retrying",
    "job:failed",
    "job:cancelled",
    "job:reclaimed",
    "job:released",
    "job:pending",
    "worker:registered",
    "worker:lost",
)


def owner_transitions(outcome: Outcome) -> tuple[Transition, ...]:
    return OWNER[type(outcome)]


def recorded_as(outcome: Outcome) -> frozenset[str]:
    """History outcomes that mean this report was already recorded (`Recorded.state` already)."""
    return frozenset(t.history for t in owner_transitions(outcome) if t.history)


def outcome_error(outcome: Outcome) -> str | None:
    return getattr(outcome, "error", None)


def outcome_delay_ms(outcome: Outcome) -> int:
    return clamp_delay_ms(outcome.delay_ms) if isinstance(outcome, Retrying) else 0


def clamp_delay_ms(value: float, maximum: int = STORE_MAX_DELAY_MS) -> int:
    """A delay in ms as an int in [0, maximum]: NaN or negative -> 0, too large -> maximum."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return 0
    if math.isnan(number) or number <= 0:
        return 0
    if number >= maximum:
        return maximum
    return int(number)


def error_text(transition: Transition, outcome: Outcome | None = None) -> str | None:
    if transition.error == OUTCOME_ERROR:
        return None if outcome is None else outcome_error(outcome)
    return transition.error


def target_status(transition: Transition, delay_ms: int = 0) -> JobStatus:
    status = transition.to_status
    if type(status) is JobStatus:  # the usual case: no lookup by value
        return status
    if status == RETRY_TARGET:
        return JobStatus.SCHEDULED if delay_ms > 0 else JobStatus.PENDING
    return JobStatus(status)


def history_entry(
    job: Job, transition: Transition, *, now: int, error: str | None
) -> dict[str, Any]:
    """The attempt-history entry `transition` appends to `job` (as it was before)."""
    return {
        "attempt": job.attempts,
        "lease_id": job.lease_id,
        "worker": job.locked_by,
        "started_at": job.started_at,
        "ended_at": now,
        "outcome": transition.history,
        "error": error,
    }


_F = FIELD_INDEX
_STATUS, _ATTEMPTS, _RUN_AT, _LOCKED_BY, _LOCKED_AT, _LEASE_EXPIRES_AT, _HEARTBEAT_AT = (
    _F["status"],
    _F["attempts"],
    _F["run_at"],
    _F["locked_by"],
    _F["locked_at"],
    _F["lease_expires_at"],
    _F["heartbeat_at"],
)
_CANCEL, _LAST_ERROR, _ERRORS, _RESULT, _CLAIMED_AT, _COMPLETED_AT, _UPDATED_AT = (
    _F["cancel_requested"],
    _F["last_error"],
    _F["errors"],
    _F["result"],
    _F["claimed_at"],
    _F["completed_at"],
    _F["updated_at"],
)
_LEASE_ID, _STARTED_AT, _HISTORY = _F["lease_id"], _F["started_at"], _F["history"]


def apply(
    job: Job,
    transition: Transition,
    *,
    now: int,
    outcome: Outcome | None = None,
    worker: str | None = None,
    lease_id: str | None = None,
    lease_ms: int = 0,
    started: bool = True,
    current: dict[str, Any] | None = None,
) -> Job:
    """The row `transition` leaves behind, computed in Python (guard not checked).

    `outcome` gives the error, result and delay of an owner transition;
    `worker`, `lease_id`, `lease_ms` and `started` describe a claim or a lease extension.
    `current` holds columns whose values in the row differ from `job`'s (e.g. the
    started marker set after the claim), so no intermediate copy is made.
    """
    # The new row's fields in a list, written by position (a hot path: once per outcome).
    values = job_values(job)
    before = job.started_at
    if current:
        before = current.get("started_at", before)
        for name, value in current.items():
            index = _F.get(name)
            if index is not None:
                values[index] = value
    error = error_text(transition, outcome)
    delay_ms = outcome_delay_ms(outcome) if outcome is not None else 0
    values[_STATUS] = target_status(transition, delay_ms)
    values[_UPDATED_AT] = now
    attempts = transition.attempts
    if attempts is Attempts.INCREMENT:
        values[_ATTEMPTS] = job.attempts + 1
    elif attempts is Attempts.GIVE_BACK:
        values[_ATTEMPTS] = job.attempts - 1
    elif attempts is Attempts.RESET:
        values[_ATTEMPTS] = 0
    run_at = transition.run_at
    if run_at is RunAt.NOW:
        values[_RUN_AT] = now
    elif run_at is RunAt.AFTER_DELAY:
        values[_RUN_AT] = now + delay_ms
    lock = transition.lock
    if lock is Lock.CLAIM:
        values[_LOCKED_BY] = worker
        values[_LOCKED_AT] = values[_CLAIMED_AT] = values[_HEARTBEAT_AT] = now
        values[_LEASE_EXPIRES_AT] = now + lease_ms
        values[_LEASE_ID] = lease_id
    elif lock is Lock.EXTEND:
        values[_HEARTBEAT_AT] = now
        values[_LEASE_EXPIRES_AT] = now + lease_ms
    elif lock is Lock.END_KEEP_WORKER or lock is Lock.END_CLEAR_WORKER:
        values[_LOCKED_AT] = values[_LEASE_EXPIRES_AT] = values[_HEARTBEAT_AT] = None
        if lock is Lock.END_CLEAR_WORKER:
            values[_LOCKED_BY] = None
    marker = transition.started
    if marker is Started.NOW:
        values[_STARTED_AT] = before if before is not None else now
    elif marker is Started.CLEAR:
        values[_STARTED_AT] = None
    elif marker is Started.CLAIM:
        values[_STARTED_AT] = now if started else None
    if transition.cancel is Cancel.REQUEST:
        values[_CANCEL] = True
    elif transition.cancel is Cancel.CLEAR:
        values[_CANCEL] = False
    if transition.error_entry:
        entry = {"attempt": job.attempts, "error": error, "worker": job.locked_by, "at": now}
        values[_ERRORS] = [*job.errors, entry]
    if transition.last_error:
        values[_LAST_ERROR] = error
    if transition.history is not None:
        entry = history_entry(job, transition, now=now, error=error)
        entry["started_at"] = before
        values[_HISTORY] = [*job.history, entry]
    if transition.finishes:
        values[_COMPLETED_AT] = now
    if transition.stores_result and isinstance(outcome, Completed):
        values[_RESULT] = outcome.result
    if transition.reopens:
        values[_COMPLETED_AT] = values[_RESULT] = None
    return job_from_values(values)


def event_worker(before: Job, after: Job) -> str | None:
    """The worker an event of this change names: the claimer, or whoever held the claim."""
    if after.status is JobStatus.CLAIMED:
        return after.locked_by
    if before.status is JobStatus.CLAIMED:
        return before.locked_by
    return None


__all__ = [
    "ALL",
    "CLAIM",
    "EVENT_KINDS",
    "OWNER",
    "SWEEP",
    "Transition",
    "apply",
    "clamp_delay_ms",
    "recorded_as",
]
