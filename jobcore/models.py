"""The job record, its statuses, and the outcomes a worker reports."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any

from jobcore.timeutil import iso


class JobStatus(enum.StrEnum):
    SCHEDULED = "scheduled"
    PENDING = "pending"
    CLAIMED = "claimed"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


compact_json = json.JSONEncoder(separators=(",", ":")).encode
"""Serialise to compact JSON (one shared encoder: cheaper than json.dumps with options)."""

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
)


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
        }
        for name in TIME_FIELDS:
            out[name] = iso(getattr(self, name))
        return out


@dataclass(frozen=True, kw_only=True, slots=True)
class NewJob:
    """A validated job ready to insert; built by `Queue` from enqueue arguments."""

    id: str
    type: str
    queue: str
    payload: dict[str, Any]
    priority: int
    max_attempts: int
    run_at: int
    timeout_ms: int | None
    idempotency_key: str | None
    parent_id: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    payload_json: str | None = field(default=None, compare=False, repr=False)  # payload, encoded


@dataclass(frozen=True, kw_only=True, slots=True)
class Lease:
    """What fences an owner's transition: the job, its claimer and the attempt number.

    `job` is the row as claimed; a backend may use it to return the updated job
    without reading the row back.
    """

    job_id: str
    worker: str
    attempt: int
    job: Job | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, kw_only=True, slots=True)
class Completed:
    lease: Lease
    result: Any
    children: tuple[NewJob, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class Retrying:
    lease: Lease
    error: str
    run_at: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Failed:
    lease: Lease
    error: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Released:
    """Graceful shutdown gave the job back unfinished; the attempt is returned."""

    lease: Lease


@dataclass(frozen=True, kw_only=True, slots=True)
class Cancelled:
    lease: Lease
    error: str = "cancelled"


Outcome = Completed | Retrying | Failed | Released | Cancelled
