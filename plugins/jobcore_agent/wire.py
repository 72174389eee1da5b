"""Translating between the hub's JSON and the core's records (jobs, leases, outcomes)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from jobcore.models import (
    TIME_FIELDS,
    Cancelled,
    Completed,
    Failed,
    Job,
    JobStatus,
    Lease,
    NewJob,
    Outcome,
    Released,
    Retrying,
)
from jobcore.timeutil import now_ms, parse_time

_JOB_FIELDS = {f.name: f for f in dataclasses.fields(Job)}
_LEASE_FIELDS = {f.name for f in dataclasses.fields(Lease)}
_EMPTY: dict[str, Any] = {"payload": {}, "errors": [], "meta": {}, "history": []}


def _ms(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, int | float):
        return int(value)
    return parse_time(str(value))


def job_from_json(data: dict[str, Any]) -> Job:
    """A `Job` from the hub's §8 JSON (ISO times, `timeout` in seconds)."""
    values: dict[str, Any] = {}
    for name, spec in _JOB_FIELDS.items():
        if name in TIME_FIELDS or name == "started_at":
            value: Any = _ms(data.get(name))
            if value is None and name in ("run_at", "created_at", "updated_at"):
                value = now_ms()
        elif name == "timeout_ms":
            timeout = data.get("timeout")
            value = None if timeout is None else int(float(timeout) * 1000)
        elif name == "status":
            value = JobStatus(data.get("status", "claimed"))
        elif name in data:
            value = data[name]
        elif name in _EMPTY:
            value = type(_EMPTY[name])()
        elif spec.default is not dataclasses.MISSING:
            value = spec.default
        elif spec.default_factory is not dataclasses.MISSING:
            value = spec.default_factory()
        elif name in ("priority", "attempts"):
            value = 0
        elif name == "max_attempts":
            value = 1
        elif name == "cancel_requested":
            value = False
        elif name in ("id", "type", "queue"):
            raise ValueError(f"claimed job JSON lacks {name!r}")
        else:
            value = None
        values[name] = value
    return Job(**values)


def make_lease(job: Job, *, lease_id: str, worker: str) -> Lease:
    """The core's `Lease` for a claim (fits both the attempt- and the lease_id-fenced shape)."""
    values: dict[str, Any] = {
        "job_id": job.id,
        "lease_id": lease_id,
        "worker": worker,
        "attempt": job.attempts,
        "job": job,
    }
    return Lease(**{k: v for k, v in values.items() if k in _LEASE_FIELDS})


def child_json(child: NewJob, now: int) -> dict[str, Any]:
    """A child job as the body of `POST /api/jobs` (validated again by the hub)."""
    body: dict[str, Any] = {
        "type": child.type,
        "payload": child.payload,
        "queue": child.queue,
        "priority": child.priority,
        "max_attempts": child.max_attempts,
        "timeout": None if child.timeout_ms is None else child.timeout_ms / 1000,
        "idempotency_key": child.idempotency_key,
    }
    delay_ms = getattr(child, "delay_ms", 0)
    if child.run_at is not None:
        delay_ms = child.run_at - now
    if delay_ms > 0:
        body["delay"] = delay_ms / 1000
    return {key: value for key, value in body.items() if value is not None}


def _reason(error: str) -> str:
    """The failure reason the hub stores: the checksum error keeps its fleet-hub name first."""
    _, _, rest = error.partition(": ")
    return rest if rest.startswith("solver_checksum_mismatch") else error


def retry_delay(outcome: Retrying, now: int) -> float:
    delay_ms = getattr(outcome, "delay_ms", None)
    if delay_ms is None:
        delay_ms = max(0, getattr(outcome, "run_at", now) - now)
    return round(delay_ms / 1000, 3)


def report_of(
    outcome: Outcome, *, worker_id: str, lease_id: str | None
) -> tuple[str, dict[str, Any]]:
    """The hub route (`result|fail|release`) and body that report `outcome`."""
    base: dict[str, Any] = {"worker_id": worker_id}
    if lease_id is not None:
        base["lease_id"] = lease_id
    now = now_ms()
    match outcome:
        case Completed(result=result, children=children):
            body = {**base, "result": result}
            if children:
                body["children"] = [child_json(child, now) for child in children]
            return "result", body
        case Retrying(error=error):
            return "fail", {
                **base,
                "reason": _reason(error),
                "retryable": True,
                "retry_in": retry_delay(outcome, now),
            }
        case Failed(error=error):
            return "fail", {**base, "reason": _reason(error), "retryable": False}
        case Cancelled(error=error):
            return "fail", {**base, "reason": error, "retryable": True, "retry_in": 0}
        case Released():
            return "release", base
    raise TypeError(f"unknown outcome {outcome!r}")


def _text(value: Any) -> Any:
    """`value` with lone surrogates in its strings written as `\\udXXX` escapes."""
    if isinstance(value, str):
        return value if value.isascii() else value.encode("utf-8", "backslashreplace").decode()
    if isinstance(value, dict):
        return {_text(key): _text(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_text(item) for item in value]
    return value


def _encodes(value: Any) -> bool:
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def sendable(kind: str, body: dict[str, Any]) -> dict[str, Any]:
    """`body` as UTF-8 JSON can carry it: a result holding a lone surrogate (valid JSON
    escapes, an undecodable file name) is described instead, as the core stores a result it
    cannot encode; other strings (a fail reason) keep such characters as escapes."""
    if _encodes(body):
        return body
    if kind == "result" and not _encodes(body.get("result")):
        try:
            shown = repr(body["result"])
        except RecursionError:
            shown = "<too deep to show>"
        body = {
            **body,
            "result": {
                "unserialisable": "the result holds a lone surrogate (U+D800-U+DFFF), "
                "which UTF-8 cannot encode",
                "repr": shown if len(shown) <= 1024 else shown[:1024] + "…",
            },
        }
    cleaned: dict[str, Any] = _text(body)
    return cleaned
