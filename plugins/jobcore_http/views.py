"""JSON shapes the hub answers with (DESIGN §8 jobs plus the fleet hub's field names)."""

from __future__ import annotations

from typing import Any

from jobcore.models import Job
from jobcore.timeutil import iso
from jobcore_http import compat

# the fleet hub's and the JSON queue's status names, accepted in filters
STATUS_ALIASES = {
    "waiting": "pending",
    "queued": "pending",
    "assigned": "claimed",
    "running": "claimed",
    "active": "claimed",
    "processing": "claimed",
    "done": "completed",
    "quarantined": "failed",
}
STATUSES = ("scheduled", "pending", "claimed", "completed", "failed", "cancelled")


def job_json(job: Job) -> dict[str, Any]:
    """A job as the API shows it: the §8 object, `lease_id`, and the fleet hub's names."""
    out = job.to_json()
    out.setdefault("lease_id", compat.lease_id_of(job))
    out["params"] = job.payload
    out["worker_id"] = job.locked_by
    out["max_runtime_ms"] = job.timeout_ms
    return out


def attempts_detail(job: Job) -> list[dict[str, Any]]:
    """Every attempt: from the store's history (v2), else rebuilt from the error entries."""
    method = getattr(job, "attempts_detail", None)
    if callable(method):
        entries: list[dict[str, Any]] = method()
        return [
            {
                **entry,
                "started_at": iso(entry.get("started_at"))
                if isinstance(entry.get("started_at"), int)
                else entry.get("started_at"),
                "ended_at": iso(entry.get("ended_at"))
                if isinstance(entry.get("ended_at"), int)
                else entry.get("ended_at"),
            }
            for entry in entries
        ]
    detail: list[dict[str, Any]] = [
        {
            "attempt": entry.get("attempt"),
            "worker": entry.get("worker"),
            "started_at": None,
            "ended_at": iso(entry["at"]) if isinstance(entry.get("at"), int) else None,
            "outcome": "retrying",
            "error": entry.get("error"),
        }
        for entry in job.errors
    ]
    if job.status == "claimed" or (job.status == "completed" and job.attempts):
        detail.append(
            {
                "attempt": job.attempts,
                "worker": job.locked_by,
                "started_at": iso(job.claimed_at),
                "ended_at": iso(job.completed_at),
                "outcome": "running" if job.status == "claimed" else "completed",
                "error": None,
            }
        )
    return detail


def normalize_statuses(values: list[str]) -> tuple[str, ...]:
    """Split commas, map aliases; raises ValueError naming an unknown status."""
    out: list[str] = []
    for value in values:
        for part in value.split(","):
            name = part.strip().lower()
            if not name:
                continue
            name = STATUS_ALIASES.get(name, name)
            if name not in STATUSES:
                raise ValueError(
                    f"unknown status {part.strip()!r}; use one of {', '.join(STATUSES)}"
                )
            out.append(name)
    return tuple(dict.fromkeys(out))


def split_values(values: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(p.strip() for v in values for p in v.split(",") if p.strip()))


def last_attempt(job: Job, worker: str, lease_id: str | None) -> dict[str, Any] | None:
    """How the job's most recent ended attempt went, if it was `worker`'s (and `lease_id`'s)."""
    history = getattr(job, "history", None)
    if history:
        entry: dict[str, Any] = history[-1]
        if lease_id is not None:
            return entry if entry.get("lease_id") == lease_id else None
        return entry if entry.get("worker") == worker else None
    if history is not None and getattr(job, "lease_id", None) is not None:
        return None  # v2 store: no ended attempt yet
    if lease_id is not None and lease_id != f"a{job.attempts}":
        return None
    if job.status == "completed" and job.locked_by == worker:
        return {"outcome": "completed", "worker": worker}
    if job.status == "cancelled" and job.locked_by == worker:
        return {"outcome": "cancelled", "worker": worker}
    if job.errors:
        last = job.errors[-1]
        if last.get("worker") == worker and last.get("attempt") == job.attempts:
            outcome = "failed" if job.status == "failed" else "retrying"
            return {"outcome": outcome, "worker": worker, "error": last.get("error")}
    return None
