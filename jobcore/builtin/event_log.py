"""Built-in lifecycle log: one record per event on the `jobcore.events` logger."""

from __future__ import annotations

import logging
from typing import Any

from jobcore.hookspecs import hookimpl
from jobcore.logs import EVENT_ATTR
from jobcore.models import Job

log = logging.getLogger("jobcore.events")


def _emit(event: str, job: Job, worker: str | None = None, **extra: Any) -> None:
    if not log.isEnabledFor(logging.INFO):
        return
    fields: dict[str, Any] = {
        "event": event,
        "job_id": job.id,
        "type": job.type,
        "queue": job.queue,
        "attempt": job.attempts,
        "worker": worker or job.locked_by or (job.errors[-1].get("worker") if job.errors else None),
    }
    fields.update({key: value for key, value in extra.items() if value is not None})
    text = f"{event} {job.type} {job.id} attempt={job.attempts}"
    for key in ("duration_ms", "error"):
        if key in fields:
            text += f" {key}={fields[key]}"
    log.info(text, extra={EVENT_ATTR: fields})


@hookimpl(trylast=True)
def jobcore_job_enqueued(job: Job) -> None:
    _emit("enqueued", job)


@hookimpl(trylast=True)
def jobcore_job_claimed(job: Job, worker: str) -> None:
    _emit("claimed", job, worker)


@hookimpl(trylast=True)
def jobcore_job_completed(job: Job, duration_ms: float) -> None:
    _emit("completed", job, duration_ms=round(duration_ms, 3))


@hookimpl(trylast=True)
def jobcore_job_retrying(job: Job, error: str) -> None:
    _emit("retrying", job, error=error)


@hookimpl(trylast=True)
def jobcore_job_failed(job: Job, error: str) -> None:
    _emit("failed", job, error=error)


@hookimpl(trylast=True)
def jobcore_job_reclaimed(job: Job, error: str) -> None:
    _emit("reclaimed", job, error=error)


@hookimpl(trylast=True)
def jobcore_job_cancelled(job: Job) -> None:
    _emit("cancelled", job)
