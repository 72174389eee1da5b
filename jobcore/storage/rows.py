"""Converting between jobs-table rows and `Job` objects (no SQL statements of its own)."""

from __future__ import annotations

import dataclasses
import json
import logging
import operator
from collections.abc import Sequence
from typing import Any

import apsw

from jobcore.models import (
    STATUSES,
    Completed,
    Job,
    JobStatus,
    NewJob,
    Outcome,
    compact_json,
    job_from_fields,
    job_from_values,
    slot_filler,
)
from jobcore.storage.base import Inserted
from jobcore.transitions import apply, owner_transitions

log = logging.getLogger("jobcore.storage")

_COLUMNS = [
    "id",
    "type",
    "queue",
    "payload",
    "status",
    "priority",
    "attempts",
    "max_attempts",
    "run_at",
    "timeout_ms",
    "idempotency_key",
    "locked_by",
    "locked_at",
    "lease_expires_at",
    "heartbeat_at",
    "cancel_requested",
    "last_error",
    "errors",
    "result",
    "parent_id",
    "meta",
    "created_at",
    "claimed_at",
    "completed_at",
    "updated_at",
    "lease_id",
    "started_at",
    "history",
    "last_event",  # not a Job field: dropped by row_to_job
]


def rows_of(conn: apsw.Connection, sql: str, params: dict[str, Any] | None = None) -> list[Any]:
    """Every row of one statement (rows typed loosely: columns are known by position)."""
    rows: list[Any] = conn.execute(sql, params).fetchall()
    return rows


def update_one(conn: apsw.Connection, sql: str, params: dict[str, Any]) -> None:
    """Run an UPDATE that must change exactly one row (its row was just read under the same
    guard in this write transaction); anything else is a bug, never ignored."""
    conn.execute(sql, params)
    if conn.changes() != 1:  # pragma: no cover - nothing writes between the read and this
        raise RuntimeError(f"expected to update one row, updated {conn.changes()}: {sql}")


def _json(text: str, column: str = "") -> Any:
    # the common empty values skip the decoder
    if text == "{}":
        return {}
    if text == "[]":
        return []
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        # a damaged value must not make the row unreadable (list, show, the sweep)
        log.warning("jobs.%s holds text that is not JSON: %.80r", column, text)
        return (
            {"corrupt": str(text)[:1000]}
            if column in ("payload", "meta", "result")
            else [{"corrupt": str(text)[:1000]}]
        )


_INTEGERS = {  # integer columns and what a damaged value reads as (None: nullable)
    "priority": 0,
    "attempts": 0,
    "max_attempts": 1,
    "run_at": 0,
    "timeout_ms": None,
    "locked_at": None,
    "lease_expires_at": None,
    "heartbeat_at": None,
    "created_at": 0,
    "claimed_at": None,
    "completed_at": None,
    "updated_at": 0,
    "started_at": None,
}


def _integer(value: Any, column: str) -> Any:
    """An integer column's value as an int; text or a blob (a hand edit) must not make
    the row unusable: the claim sorts by priority and run_at, executors divide timeout_ms."""
    if isinstance(value, float) and value == value and abs(value) < 2**63:
        return int(value)
    try:
        return int(float(value.decode() if isinstance(value, bytes) else value))
    except (TypeError, ValueError, OverflowError, UnicodeDecodeError):
        log.warning(
            "jobs.%s holds %.80r, not an integer; read as %s", column, value, _INTEGERS[column]
        )
        return _INTEGERS[column]


_FIELDS = len(_COLUMNS) - 1  # every column but last_event is a Job field, in field order
_V2_DEFAULTS = (None, None, "[]")  # lease_id, started_at, history: absent from v1 rows
_INTEGER_AT = tuple((_COLUMNS.index(column), column) for column in _INTEGERS)
_integers = operator.itemgetter(*(index for index, _ in _INTEGER_AT))
_INTEGER_TYPES = {int, type(None)}
_PAYLOAD, _STATUS, _CANCEL, _ERRORS, _RESULT, _META, _HISTORY = (
    _COLUMNS.index(column)
    for column in ("payload", "status", "cancel_requested", "errors", "result", "meta", "history")
)


def row_to_job(row: Sequence[Any]) -> Job:
    """Build a `Job` from a `SELECT *` / `RETURNING *` row of the jobs table."""
    values = list(row[:_FIELDS])
    if len(values) < _FIELDS:
        if len(values) < _FIELDS - len(_V2_DEFAULTS):
            raise TypeError(f"a jobs row has at least {_FIELDS - 3} columns, not {len(values)}")
        values += _V2_DEFAULTS[len(values) - _FIELDS :]
    if not _INTEGER_TYPES.issuperset(map(type, _integers(values))):
        for index, column in _INTEGER_AT:
            value = values[index]
            if value is not None and type(value) is not int:
                values[index] = _integer(value, column)
    values[_HISTORY] = _json(values[_HISTORY] or "[]", "history")
    values[_PAYLOAD] = _json(values[_PAYLOAD], "payload")
    status = values[_STATUS]
    values[_STATUS] = STATUSES.get(status) or JobStatus(status)
    values[_CANCEL] = bool(values[_CANCEL])
    values[_ERRORS] = _json(values[_ERRORS], "errors")
    if values[_RESULT] is not None:
        values[_RESULT] = _json(values[_RESULT], "result")
    values[_META] = _json(values[_META], "meta")
    return job_from_values(values)


def insert_values(job: NewJob, now: int) -> tuple[Any, ...]:
    run_at = job.run_at_for(now)
    status = "pending" if run_at <= now else "scheduled"
    payload = job.payload_json if job.payload_json is not None else compact_json(job.payload)
    return (
        job.id,
        job.type,
        job.queue,
        payload,
        status,
        job.priority,
        job.max_attempts,
        run_at,
        job.timeout_ms,
        job.idempotency_key,
        job.parent_id,
        compact_json(job.meta) if job.meta else "{}",
        now,
        job.limit_key,
    )


def new_row(
    job: NewJob, now: int, *, run_at: int | None = None, status: JobStatus | None = None
) -> Job:
    """The row an insert wrote, built without reading it back.

    `run_at` and `status` default to what `job` says at `now`; a backend that
    had the store compute them passes the stored values.
    """
    if run_at is None:
        run_at = job.run_at_for(now)
    if status is None:
        status = JobStatus.PENDING if run_at <= now else JobStatus.SCHEDULED
    # Every field in `Job`'s order (built without its __init__: once per enqueued job).
    return job_from_fields(
        job.id, job.type, job.queue, job.payload, status, job.priority,
        0, job.max_attempts, run_at, job.timeout_ms, job.idempotency_key,
        None, None, None, None,  # locked_by, locked_at, lease_expires_at, heartbeat_at
        False, None, [], None,  # cancel_requested, last_error, errors, result
        job.parent_id, dict(job.meta), now,  # parent_id, meta, created_at
        None, None, now,  # claimed_at, completed_at, updated_at
        None, None, [],  # lease_id, started_at, history
    )  # fmt: skip


def inserted_rows(
    jobs: Sequence[NewJob], now: int, *, run_at: int | None = None, status: JobStatus | None = None
) -> list[Inserted]:
    """`Inserted(new_row(job, now, run_at=run_at, status=status), created=True)` for each
    of `jobs`: the answer of a batch that inserted every job, made in one loop."""
    made: list[Inserted] = []
    append, row_of, pending, scheduled = made.append, job_from_fields, _PENDING, _SCHEDULED
    for job in jobs:
        due = run_at
        if due is None:
            due = job.run_at if job.run_at is not None else now + job.delay_ms
        row = row_of(
            job.id, job.type, job.queue, job.payload,
            (pending if due <= now else scheduled) if status is None else status, job.priority,
            0, job.max_attempts, due, job.timeout_ms, job.idempotency_key,
            None, None, None, None, False, None, [], None,
            job.parent_id, dict(job.meta), now, None, None, now, None, None, [],
        )  # fmt: skip
        append(_inserted(row, True))
    return made


_PENDING, _SCHEDULED = JobStatus.PENDING, JobStatus.SCHEDULED
_inserted = slot_filler(Inserted, ("job", "created"))


def after_transition(job: Job, outcome: Outcome, now: int) -> Job:
    """The row an owner transition leaves behind, derived from `jobcore.transitions`.

    `job` is the row as it stood when the transition ran (its `cancel_requested`
    picks which of the outcome's transitions applied).
    """
    for transition in owner_transitions(outcome):
        if transition.guard.cancel_requested in (None, job.cancel_requested):
            return apply(job, transition, now=now, outcome=outcome)
    raise TypeError(f"no transition for {outcome!r}")  # pragma: no cover - table is complete


def result_json(outcome: Outcome) -> str | None:
    """The `result` column of a completion (JSON text; a handler's None is `null`)."""
    if not isinstance(outcome, Completed):
        return None
    return "null" if outcome.result is None else compact_json(outcome.result)


def stored_outcome(outcome: Outcome, error: str | None) -> Outcome:
    """The outcome as stored: its error text cleaned the way the statement bound it."""
    if error is None or getattr(outcome, "error", None) == error:
        return outcome
    return dataclasses.replace(outcome, error=error)  # type: ignore[arg-type]
