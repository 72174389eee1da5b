"""`HookRecorder`: a plugin that records lifecycle notifications, in order."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from jobcore.hookspecs import hookimpl
from jobcore.models import Job


@dataclass(frozen=True)
class Call:
    event: str  # hook name without the `jobcore_` prefix, e.g. "job_completed"
    kwargs: dict[str, Any]

    @property
    def job(self) -> Job | None:
        job = self.kwargs.get("job")
        return job if isinstance(job, Job) else None


class HookRecorder:
    """Register with `pm.register(HookRecorder(), name="recorder")`; read `.calls`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: list[Call] = []

    def _add(self, event: str, **kwargs: Any) -> None:
        with self._lock:
            self.calls.append(Call(event, kwargs))

    def events(self, job_id: str | None = None) -> list[str]:
        """Event names in order, optionally only those about one job."""
        with self._lock:
            return [
                call.event
                for call in self.calls
                if job_id is None or (call.job is not None and call.job.id == job_id)
            ]

    def of(self, event: str) -> list[Call]:
        with self._lock:
            return [call for call in self.calls if call.event == event]

    @hookimpl
    def jobcore_job_enqueued(self, job: Job) -> None:
        self._add("job_enqueued", job=job)

    @hookimpl
    def jobcore_job_claimed(self, job: Job, worker: str) -> None:
        self._add("job_claimed", job=job, worker=worker)

    @hookimpl
    def jobcore_job_completed(self, job: Job, duration_ms: float) -> None:
        self._add("job_completed", job=job, duration_ms=duration_ms)

    @hookimpl
    def jobcore_job_retrying(self, job: Job, error: str) -> None:
        self._add("job_retrying", job=job, error=error)

    @hookimpl
    def jobcore_job_failed(self, job: Job, error: str) -> None:
        self._add("job_failed", job=job, error=error)

    @hookimpl
    def jobcore_job_reclaimed(self, job: Job, error: str) -> None:
        self._add("job_reclaimed", job=job, error=error)

    @hookimpl
    def jobcore_job_cancelled(self, job: Job) -> None:
        self._add("job_cancelled", job=job)

    @hookimpl
    def jobcore_worker_started(self, worker: str) -> None:
        self._add("worker_started", worker=worker)

    @hookimpl
    def jobcore_worker_stopped(self, worker: str) -> None:
        self._add("worker_stopped", worker=worker)
