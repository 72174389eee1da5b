"""The job record, its statuses, and the outcomes a worker reports."""

from __future__ import annotations

import enum
import json
import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from jobcore.timeutil import iso

_C = TypeVar("_C")


class JobStatus(enum.StrEnum):
    SCHEDULED = "scheduled"
    PENDING = "pending"
    CLAIMED = "claimed"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


compact_json = json.JSONEncoder(separators=(",", ":")).encode
"""Serialise to compact JSON (one shared encoder: cheaper than json.dumps with options)."""

strict_json = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
"""Like `compact_json`, but NaN and Infinity (not JSON: `show --json` and other stores
reject them) raise ValueError."""


def finite(value: Any) -> Any:
    """`value` with NaN and infinite floats replaced by None (as JSON.stringify does)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite(item) for item in value]
    return value


UNFINISHED = (JobStatus.SCHEDULED, JobStatus.PENDING, JobStatus.CLAIMED)
FINISHED = (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED)

TIME_FIELDS = (
    "run_at",
    "locked_at",
    "lease_expires_at",
    "heartbeat_at",
    "created_at",
    "claimed_at",
    "completed_at",
    "updated_at",
    "started_at",
)

HISTORY_OUTCOMES = ("completed", "retrying", "failed", "reclaimed", "released", "cancelled")
"""What an attempt-history entry's `outcome` can say (plus `running` in `attempts_detail`)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Job:
    """One row of the jobs table. Times are integer ms UTC; `timeout_ms` may be None."""

    id: str
    type: str
    queue: str
    payload: dict[str, Any]
    status: JobStatus
    priority: int
    attempts: int
    max_attempts: int
    run_at: int
    timeout_ms: int | None
    idempotency_key: str | None
    locked_by: str | None
    locked_at: int | None
    lease_expires_at: int | None
    heartbeat_at: int | None
    cancel_requested: bool
    last_error: str | None
    errors: list[dict[str, Any]]
    result: Any
    parent_id: str | None
    meta: dict[str, Any]
    created_at: int
    claimed_at: int | None
    completed_at: int | None
    updated_at: int
    lease_id: str | None = None
    started_at: int | None = None
    history: list[dict[str, Any]] = field(default_factory=list)

    def attempts_detail(self) -> list[dict[str, Any]]:
        """Every claim's entry of `history`, plus a `running` entry for a live claim."""
        detail = list(self.history)
        if self.status is JobStatus.CLAIMED:
            detail.append(
                {
                    "attempt": self.attempts,
                    "lease_id": self.lease_id,
                    "worker": self.locked_by,
                    "started_at": self.started_at,
                    "ended_at": None,
                    "outcome": "running",
                    "error": None,
                }
            )
        return detail

    def to_json(self) -> dict[str, Any]:
        """The DESIGN §8 JSON shape: ISO-8601 times, `timeout` in seconds."""
        out: dict[str, Any] = {
            "id": self.id,
            "type": self.type,
            "queue": self.queue,
            "payload": self.payload,
            "status": str(self.status),
            "priority": self.priority,
            "attempts": self.attempts,
            "max_attempts": self.max_attempts,
            "timeout": None if self.timeout_ms is None else self.timeout_ms / 1000,
            "idempotency_key": self.idempotency_key,
            "locked_by": self.locked_by,
            "cancel_requested": self.cancel_requested,
            "last_error": self.last_error,
            "errors": [
                {**entry, "at": iso(entry["at"])} if isinstance(entry.get("at"), int) else entry
                for entry in self.errors
            ],
            "result": self.result,
            "parent_id": self.parent_id,
            "meta": self.meta,
            "lease_id": self.lease_id,
            "history": [_iso_entry(entry) for entry in self.history],
        }
        for name in TIME_FIELDS:
            out[name] = iso(getattr(self, name))
        return out


def _iso_entry(entry: dict[str, Any]) -> dict[str, Any]:
    out = dict(entry)
    for name in ("started_at", "ended_at"):
        if isinstance(out.get(name), int):
            out[name] = iso(out[name])
    return out


_JOB_FIELDS = tuple(f.name for f in fields(Job))
FIELD_INDEX = {name: index for index, name in enumerate(_JOB_FIELDS)}
"""Each field of `Job` by name: its position in `job_values` and `job_from_values`."""
_job_values = operator.attrgetter(*_JOB_FIELDS)


def slot_filler(cls: type[_C], names: Sequence[str]) -> Callable[..., _C]:
    """A function taking the value of each of `names`, in order, that returns a `cls` with
    its slots set through their descriptors: no generated __init__, no frozen __setattr__,
    one call per slot in straight-line code (made once, as dataclasses makes __init__)."""
    setters = {f"_set{i}": getattr(cls, name).__set__ for i, name in enumerate(names)}
    args = ", ".join(f"v{i}" for i in range(len(names)))
    body = "".join(f"    _set{i}(made, v{i})\n" for i in range(len(names)))
    namespace: dict[str, Any] = {"_new": object.__new__, "_cls": cls, **setters}
    exec(f"def fill({args}):\n    made = _new(_cls)\n{body}    return made\n", namespace)
    fill: Callable[..., _C] = namespace["fill"]
    return fill


job_from_fields = slot_filler(Job, _JOB_FIELDS)
"""`job_from_fields(id, type, …, history)`: a `Job` from the value of every field as
positional arguments, in field order (types not checked). A Job is built per claimed row,
per recorded outcome (the worker's hot path) and per enqueued job."""


def job_from_values(values: Sequence[Any]) -> Job:
    """A `Job` from the value of every field, in field order (types not checked)."""
    if len(values) != len(_JOB_FIELDS):
        raise TypeError(f"a Job has {len(_JOB_FIELDS)} fields, not {len(values)}")
    return job_from_fields(*values)


def job_values(job: Job) -> list[Any]:
    """The value of every field of `job`, in field order."""
    return list(_job_values(job))


def replace_job(job: Job, **changes: Any) -> Job:
    """`dataclasses.replace` for the frozen `Job`, several times faster (a hot path of the worker).

    Names that are not fields of `Job` are ignored.
    """
    values = list(_job_values(job))
    for name, value in changes.items():
        index = FIELD_INDEX.get(name)
        if index is not None:
            values[index] = value
    return job_from_values(values)


STATUSES: dict[str, JobStatus] = {str(status): status for status in JobStatus}
"""Each status by its text: a dict lookup, cheaper than calling `JobStatus(text)`."""


@dataclass(frozen=True, kw_only=True, slots=True)
class NewJob:
    """A validated job ready to insert; built by `Queue` from enqueue arguments.

    `run_at` is absolute (ms UTC) when given; when None the store sets it to
    its own now + `delay_ms` at insert (time comes from the store).
    """

    id: str
    type: str
    queue: str
    payload: dict[str, Any]
    priority: int
    max_attempts: int
    run_at: int | None
    timeout_ms: int | None
    idempotency_key: str | None
    parent_id: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    delay_ms: int = 0
    payload_json: str | None = field(default=None, compare=False, repr=False)  # payload, encoded
    limit_key: str | None = None  # from the type's `concurrency_key` (DESIGN §16)

    def run_at_for(self, now: int) -> int:
        """When this job becomes due, given the store's now at insert."""
        return self.run_at if self.run_at is not None else now + self.delay_ms


_NEW_JOB_FIELDS = tuple(f.name for f in fields(NewJob))
new_job_from_fields = slot_filler(NewJob, _NEW_JOB_FIELDS)
"""`new_job_from_fields(id, type, …, payload_json)`: a `NewJob` from the value of every
field as positional arguments, in field order (types not checked): once per enqueued job."""


def new_job_from_values(values: Sequence[Any]) -> NewJob:
    """A `NewJob` from the value of every field, in field order (types not checked).

    As `job_from_values`: no generated __init__, so cheaper once per enqueued job.
    """
    if len(values) != len(_NEW_JOB_FIELDS):
        raise TypeError(f"a NewJob has {len(_NEW_JOB_FIELDS)} fields, not {len(values)}")
    return new_job_from_fields(*values)


@dataclass(frozen=True, slots=True)
class Lease:
    """What fences an owner's transition: the job and the opaque token of its claim.

    `lease_id` is new for every claim, so a report from an expired claim can
    never touch a later one. `worker` is who holds it (for logs and history).
    `job` is the row as claimed; a backend may use it to return the updated
    job without reading the row back.
    """

    job_id: str
    lease_id: str
    worker: str
    job: Job | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, job: Job) -> Lease:
        """The lease of a job as its claim returned it."""
        if job.lease_id is None or job.locked_by is None:
            raise ValueError(f"job {job.id} carries no lease (status {job.status})")
        return cls(job.id, job.lease_id, job.locked_by, job)


@dataclass(frozen=True, slots=True)
class Completed:
    """The handler returned `result`; `children` are inserted in the same transaction."""

    lease: Lease
    result: Any
    children: tuple[NewJob, ...] = ()


@dataclass(frozen=True, slots=True)
class Retrying:
    """The attempt failed and may run again `delay_ms` after the store's now.

    The caller clamps `delay_ms` to [0, max_retry_delay]; backends clamp again
    to a hard bound so no value can make a time the store cannot hold.
    """

    lease: Lease
    error: str
    delay_ms: int = 0


@dataclass(frozen=True, slots=True)
class Failed:
    """The attempt failed for good."""

    lease: Lease
    error: str


@dataclass(frozen=True, slots=True)
class Released:
    """The job goes back unfinished; the attempt is given back (shutdown, not started in time)."""

    lease: Lease


@dataclass(frozen=True, slots=True)
class Cancelled:
    """The claim ends `cancelled` (cancel was requested and the handler stopped)."""

    lease: Lease
    error: str = "cancelled"


Outcome = Completed | Retrying | Failed | Released | Cancelled


@dataclass(frozen=True, slots=True)
class Event:
    """One row of the store's event log: a job transition or a worker event.

    `kind` is e.g. `job:completed` or `worker:lost`. `data`: what `add_event`
    stored, plus, while the job exists, its `type` and `queue` (read the job for
    the rest); a job transition's event also stores, under `job`, the columns it
    changed as it left them (`jobcore.event_snapshot`). `worker_id`: the
    claimer, or the worker whose claim ended.
    """

    seq: int
    at: int
    kind: str
    job_id: str | None = None
    worker_id: str | None = None
    data: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "at": iso(self.at),
            "kind": self.kind,
            "job_id": self.job_id,
            "worker_id": self.worker_id,
            "data": self.data,
        }
