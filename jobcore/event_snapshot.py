"""A job event's snapshot: the job as its transition left it, not as it is now.

Each job transition that appends an event stores, in the event's `data`, the
columns that transitions change (`SNAPSHOT_FIELDS`) under the key `job`, as
the row was right after the transition (SQLite: the `jobs_event` trigger;
PostgreSQL: the statement's own event insert). A reader lays them over the
job as read now (`job_at`), so a `job:claimed` event of a job completed since
still says `claimed`, with the worker, attempt and lease of that claim.

The lists (`errors`, `history`) and the other columns come from the job now.
`job:enqueued` events store no snapshot (one insert trigger, or one event row
per batch statement, must stay cheap): the job as enqueued is its fields with
no attempt, claim, error or result yet.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jobcore.models import Job, JobStatus

SNAPSHOT_FIELDS = (
    "status",
    "attempts",
    "run_at",
    "locked_by",
    "locked_at",
    "lease_id",
    "lease_expires_at",
    "heartbeat_at",
    "cancel_requested",
    "last_error",
    "claimed_at",
    "started_at",
    "completed_at",
    "updated_at",
)
"""The columns a transition may change, stored with its event (key `job` of the data)."""

SNAPSHOT_KEY = "job"


def job_at(job: Job, kind: str, at: int, data: dict[str, Any] | None) -> Job:
    """`job` (as read now) as the event `kind` at `at` with `data` left it."""
    snapshot = (data or {}).get(SNAPSHOT_KEY)
    if isinstance(snapshot, dict):
        values: dict[str, Any] = {
            name: snapshot[name] for name in SNAPSHOT_FIELDS if name in snapshot
        }
        if "status" in values:
            values["status"] = JobStatus(values["status"])
        if "cancel_requested" in values:
            values["cancel_requested"] = bool(values["cancel_requested"])
        then = dataclasses.replace(job, **values)
        if then.status is not JobStatus.COMPLETED or (job.status, job.completed_at) != (
            JobStatus.COMPLETED,
            then.completed_at,
        ):
            then = dataclasses.replace(then, result=None)  # not this completion's result
        return then
    if kind == "job:enqueued":
        first = not job.history and job.attempts == 0
        return dataclasses.replace(
            job,
            status=JobStatus.SCHEDULED if first and job.run_at > at else JobStatus.PENDING,
            attempts=0,
            locked_by=None,
            locked_at=None,
            lease_id=None,
            lease_expires_at=None,
            heartbeat_at=None,
            cancel_requested=False,
            last_error=None,
            errors=[],
            result=None,
            claimed_at=None,
            started_at=None,
            completed_at=None,
            updated_at=job.created_at,
            history=[],
        )
    return job
