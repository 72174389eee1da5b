"""The workers view: the hub's registry of agents merged with who holds claims in the store."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jobcore.models import Job
from jobcore_http.dashboard.job_view import ms_of
from jobcore_http.dashboard.reader import Claims

IDLE_MS = 10 * 60_000
"""A worker without claims that was seen this recently counts as idle, else inactive."""


@dataclass(slots=True)
class WorkerRow:
    worker_id: str
    state: str
    last_seen: int | None
    name: str | None = None
    capabilities: str = ""
    running: int = 0
    current: list[Job] = field(default_factory=list)


def _capabilities(entry: dict[str, Any]) -> str:
    parts = []
    if entry.get("cores"):
        parts.append(f"{entry['cores']} cores")
    if entry.get("ram_gb"):
        parts.append(f"{entry['ram_gb']} GB RAM")
    if entry.get("tags"):
        parts.append("tags " + ", ".join(map(str, entry["tags"])))
    if entry.get("types"):
        parts.append("types " + ", ".join(map(str, entry["types"])))
    return "; ".join(parts)


def worker_rows(
    claims: list[Claims],
    seen: dict[str, int],
    registry: Callable[[], list[dict[str, Any]]] | None,
    now: int,
) -> list[WorkerRow]:
    """One row per worker: registered agents, holders of claims, and workers active today."""
    rows: dict[str, WorkerRow] = {}
    for held in claims:
        state = "active" if (held.lease_until or 0) >= now else "lost"
        rows[held.worker] = WorkerRow(
            held.worker, state, held.last_seen, running=held.count, current=held.sample
        )
    for worker, last in seen.items():
        if worker not in rows:
            rows[worker] = WorkerRow(worker, "idle" if now - last < IDLE_MS else "inactive", last)
    for entry in registry() if registry is not None else []:
        worker = str(entry.get("worker_id") or entry.get("id") or "?")
        row = rows.setdefault(worker, WorkerRow(worker, "idle", None))
        row.state = str(entry.get("state") or row.state)
        row.name = entry.get("name")
        row.capabilities = _capabilities(entry)
        registered_seen = ms_of(entry.get("last_seen"))
        if registered_seen is not None:
            row.last_seen = max(row.last_seen or 0, registered_seen)
    order = {"active": 0, "lost": 1, "idle": 2, "inactive": 3}
    return sorted(
        rows.values(), key=lambda r: (order.get(r.state, 4), -(r.last_seen or 0), r.worker_id)
    )
