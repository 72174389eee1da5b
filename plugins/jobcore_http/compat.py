"""The few storage calls whose signatures change with Storage contract v2, in one place.

Until storage v2 lands the hub runs on the v1 store (caller's clock, leases
fenced by attempt number); afterwards these become direct calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jobcore.models import Failed, Job, Lease, Outcome, Retrying
from jobcore.storage.base import Recorded, Storage
from jobcore.timeutil import now_ms

V2 = hasattr(Storage, "now")


def store_now(storage: Any) -> int:
    return int(storage.now()) if V2 else now_ms()


def lease_id_of(job: Job) -> str | None:
    """The claim's opaque token (v1: the attempt number stands in)."""
    if V2:
        return getattr(job, "lease_id", None)
    return f"a{job.attempts}" if job.locked_by else None


def lease_of(job: Job) -> Lease:
    if V2:
        return Lease.of(job)  # type: ignore[attr-defined,no-any-return,unused-ignore]
    return Lease(job_id=job.id, worker=job.locked_by or "", attempt=job.attempts, job=job)  # type: ignore[call-arg,unused-ignore]


def retrying(lease: Lease, error: str, delay_ms: int, now: int) -> Outcome:
    if V2:
        return Retrying(lease, error, delay_ms)  # type: ignore[call-arg,arg-type,misc,unused-ignore]
    return Retrying(lease=lease, error=error, run_at=now + delay_ms)  # type: ignore[call-arg,unused-ignore]


def failed(lease: Lease, error: str) -> Outcome:
    return Failed(lease=lease, error=error)


def claim(
    storage: Any,
    worker: str,
    limit: int,
    lease_ms: int,
    queues: Sequence[str],
    types: Sequence[str],
) -> list[Job]:
    if V2:
        jobs: list[Job] = storage.claim(
            worker=worker, limit=limit, lease_ms=lease_ms, queues=queues, types=types
        )
        return jobs
    jobs = storage.claim(
        worker=worker, limit=limit, now=now_ms(), lease_ms=lease_ms, queues=queues, types=types
    )
    return jobs


def record(storage: Any, outcomes: Sequence[Outcome]) -> list[Recorded]:
    if V2:
        recorded: list[Recorded] = storage.record(outcomes)
        return recorded
    recorded = storage.record(outcomes, now=now_ms())
    return recorded


def extend(storage: Any, leases: Sequence[Lease], lease_ms: int) -> dict[str, bool]:
    if V2:
        owned: dict[str, bool] = storage.extend_leases(leases, lease_ms=lease_ms)
        return owned
    owned = storage.extend_leases(leases, now=now_ms(), lease_ms=lease_ms)
    return owned


def retry_ids(storage: Any, ids: Sequence[str]) -> list[Job | None]:
    out: list[Job | None] = storage.retry(ids) if V2 else storage.retry(ids, now=now_ms())
    return out


def cancel_ids(storage: Any, ids: Sequence[str]) -> list[Job | None]:
    out: list[Job | None] = storage.cancel(ids) if V2 else storage.cancel(ids, now=now_ms())
    return out


def changed(storage: Any) -> bool:
    """Did another connection commit since this thread last asked? (never blocks)"""
    if V2:
        return bool(storage.wait_for_change(0))
    return bool(storage.changed())


def record_state(item: Recorded) -> str:
    if V2:
        return str(item.state)  # type: ignore[attr-defined,unused-ignore]
    return "recorded" if item.job is not None else "stale"


def insert(storage: Any, jobs: Sequence[Any]) -> list[Any]:
    out: list[Any] = storage.insert(jobs) if V2 else storage.insert(jobs, now_ms())
    return out


def sweep(queue: Any) -> list[Any]:
    out: list[Any] = queue.sweep()
    return out
