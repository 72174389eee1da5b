"""Retry or cancel every job a filter matches (the bulk routes and the dashboard's actions)."""

from __future__ import annotations

from typing import Literal

from jobcore import wakeup
from jobcore.errors import IllegalTransition
from jobcore.plugins import notify
from jobcore_http.hub import Hub
from jobcore_http.store import JobFilter

PAGE = 500


def bulk_change(
    hub: Hub, where: JobFilter, action: Literal["retry", "cancel"] | str
) -> dict[str, int]:
    """`{matched, changed}`: jobs matching `where` (default statuses: failed and cancelled
    to retry; scheduled, pending and claimed to cancel), and how many changed, in pages of
    500, one transaction each; a job that cannot change is counted, not an error."""
    if action not in ("retry", "cancel"):
        raise ValueError(f"unknown bulk action {action!r}")
    if not where.statuses:
        statuses = (
            ("failed", "cancelled") if action == "retry" else ("scheduled", "pending", "claimed")
        )
        where = JobFilter(statuses, where.types, where.queues, where.worker, where.q)
    change = hub.storage.retry if action == "retry" else hub.storage.cancel
    matched = changed = 0
    before: str | None = None
    while True:
        page = hub.store.search_jobs(where, before=before, limit=PAGE, budget_ms=2000)
        before = page.next_cursor
        matched += len(page.jobs)
        ids = [job.id for job in page.jobs]
        try:
            with hub.storage.transaction():
                results = change(ids)
        except IllegalTransition:  # e.g. an idempotency key taken again: one by one
            results = []
            for job_id in ids:
                try:
                    with hub.storage.transaction():
                        results.extend(change([job_id]))
                except IllegalTransition:
                    results.append(None)
        changed += sum(1 for job in results if job is not None)
        for job in results:
            if job is not None and job.status == "cancelled":
                notify(hub.queue.pm, "jobcore_job_cancelled", job=job)
        if before is None:
            break
    if changed:
        wakeup.notify(hub.queue.wake_key)
    return {"matched": matched, "changed": changed}
