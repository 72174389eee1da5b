"""Rows of the jobs table as `Job` objects, and the values that go into them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from jobcore.models import (
    FIELD_INDEX,
    Completed,
    Job,
    JobStatus,
    Outcome,
    job_from_values,
    job_values,
)
from jobcore.transitions import Transition
from jobcore_postgres.statements import JOB_COLUMNS, SLIM_COLUMNS

json_strict = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
"""Compact JSON that refuses NaN and infinities (PostgreSQL's json type would)."""

_decode = json.JSONDecoder().decode


def json_loads(data: bytes | bytearray | memoryview | str) -> Any:
    """`json.loads` for the json and jsonb columns the server sends (UTF-8 text).

    Most of a job's JSON columns are empty (`errors`, `history`, `meta`, a noop's
    payload): those skip the parser, and the rest skip `json.loads`' encoding
    detection. Every call answers a fresh object.
    """
    if isinstance(data, str):
        return _decode(data)
    if data == b"[]":
        return []
    if data == b"{}":
        return {}
    return _decode(bytes(data).decode())


def result_json(result: Any) -> str:
    """A handler's result as stored (`json_strict`); None, the usual result, needs no encoder."""
    return "null" if result is None else json_strict(result)


_STATUS: dict[str, JobStatus] = {status.value: status for status in JobStatus}


_STATUS_AT = FIELD_INDEX["status"]
_WIDTH = len(JOB_COLUMNS)  # JOB_COLUMNS are Job's fields in order: a row is a Job's values

# Where each column of a slim answer goes among a Job's fields, and which fields a
# slim answer leaves as the claimed row had them (`SLIM_SKIPPED`).
_SLIM_AT = tuple(FIELD_INDEX[name] for name in SLIM_COLUMNS)
_ERRORS_AT, _HISTORY_AT, _RESULT_AT = (FIELD_INDEX[n] for n in ("errors", "history", "result"))


def row_to_job(row: Sequence[Any]) -> Job:
    """A `Job` from a row that starts with every column of `JOB_COLUMNS` (more are ignored)."""
    if len(row) < _WIDTH:  # a shorter row: the fields it lacks take their defaults
        named = dict(zip(JOB_COLUMNS, row, strict=False))
        named["status"] = _STATUS[named["status"]]
        return Job(**named)
    values = list(row[:_WIDTH]) if len(row) > _WIDTH else list(row)
    values[_STATUS_AT] = _STATUS[values[_STATUS_AT]]
    return job_from_values(values)


def slim_to_job(row: Sequence[Any], outcome: Outcome, transition: Transition) -> Job:
    """The updated job from a slim answer and the claimed row the reporter holds."""
    claimed = outcome.lease.job
    assert claimed is not None
    values = job_values(claimed)
    for at, value in zip(_SLIM_AT, row, strict=False):
        values[at] = value
    values[_STATUS_AT] = _STATUS[values[_STATUS_AT]]
    last_error_entry, last_history_entry = row[-2], row[-1]
    if transition.error_entry:
        values[_ERRORS_AT] = [*claimed.errors, last_error_entry]
    if transition.history:
        values[_HISTORY_AT] = [*claimed.history, last_history_entry]
    if isinstance(outcome, Completed):
        values[_RESULT_AT] = outcome.result
    return job_from_values(values)


def event_data(data: Any, type_name: str | None, queue: str | None) -> dict[str, Any] | None:
    """What was stored with an event, plus its job's type and queue if the job exists."""
    value: dict[str, Any] | None = None
    if data is not None:
        value = data if isinstance(data, dict) else {"value": data}
    if type_name is not None:
        value = {**(value or {}), "type": type_name, "queue": queue}
    return value


def clean_text(value: str | None) -> str | None:
    """Text PostgreSQL can store: a NUL (text cannot hold one) is shown as `\\x00` and a
    lone surrogate (not UTF-8: an undecodable file name in an exception) as `\\udcff`,
    instead of failing the statement that carries it (SQLite's `clean_text` does the same)."""
    if value is None:
        return None
    if "\x00" in value:
        value = value.replace("\x00", "\\x00")
    if not value.isascii():
        value = value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def clean_json(value: Any) -> Any:
    """`value` with every string in it (object keys too) made `clean_text`."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):
        return [clean_json(item) for item in value]
    if isinstance(value, dict):
        return {clean_json(key): clean_json(item) for key, item in value.items()}
    return value


def jsonb_text(value: Any) -> str:
    """`value` as JSON a jsonb column takes: jsonb refuses `\\u0000` and lone surrogate
    escapes (a json column keeps them as written), so such strings are `clean_text`."""
    text = json_strict(value)
    if "\\u0000" in text or "\\ud" in text:  # non-ASCII is escaped: surrogates show as \\udXXX
        text = json_strict(clean_json(value))
    return text
