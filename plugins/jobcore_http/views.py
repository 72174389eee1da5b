"""JSON shapes the hub answers with (DESIGN §8 jobs plus the fleet hub's field names)."""

from __future__ import annotations

from typing import Any

from jobcore.models import Job
from jobcore.timeutil import iso

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
    out["params"] = job.payload
    out["worker_id"] = job.locked_by
    out["max_runtime_ms"] = job.timeout_ms
    return out


def attempts_detail(job: Job) -> list[dict[str, Any]]:
    """Every attempt from the store's history, plus a `running` one for a live claim."""
    return [
        {
            **entry,
            "started_at": _iso(entry.get("started_at")),
            "ended_at": _iso(entry.get("ended_at")),
        }
        for entry in job.attempts_detail()
    ]


def _iso(value: Any) -> Any:
    return iso(value) if isinstance(value, int) else value


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
    if not job.history:
        return None
    entry: dict[str, Any] = job.history[-1]
    if entry.get("worker") != worker:
        return None
    if lease_id is not None and entry.get("lease_id") != lease_id:
        return None
    return entry
