"""What a handler receives besides its payload."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from jobcore.errors import Interrupted
from jobcore.models import Job, NewJob

if TYPE_CHECKING:
    from jobcore.config import Config
    from jobcore.registry import JobType

STOP_REASONS = ("shutdown", "cancel", "timeout", "lease lost")


class JobContext:
    """Per-attempt context: the job, a logger, settings, heartbeat, stop requests, child enqueue.

    Jobs enqueued through `ctx.enqueue` are validated at once but written in the
    same transaction that completes this job, and dropped if this attempt fails.
    """

    def __init__(
        self,
        *,
        job: Job,
        job_type: JobType,
        payload: Any,
        worker: str,
        config: Config,
        build_child: Callable[..., NewJob],
        request_heartbeat: Callable[[], None],
    ) -> None:
        self.job = job
        self.job_type = job_type
        self.payload = payload
        self.worker = worker
        self.config = config
        self.children: list[NewJob] = []
        self._build_child = build_child
        self._request_heartbeat = request_heartbeat
        self._stop_event: threading.Event | None = None  # made on first wait()
        self._stop_reason: str | None = None

    @property
    def logger(self) -> logging.LoggerAdapter[logging.Logger]:
        """A logger named `jobcore.job.<type>` carrying the job id and attempt."""
        return logging.LoggerAdapter(
            logging.getLogger(f"jobcore.job.{self.job.type}"),
            {"job_id": self.job.id, "attempt": self.job.attempts},
        )

    @property
    def attempt(self) -> int:
        return self.job.attempts

    @property
    def should_stop(self) -> bool:
        """True once shutdown's deadline passed, a cancel was requested, or the attempt timed out."""
        return self._stop_reason is not None

    @property
    def stop_reason(self) -> str | None:
        return self._stop_reason

    def request_stop(self, reason: str) -> None:
        if reason not in STOP_REASONS:
            raise ValueError(f"unknown stop reason {reason!r}")
        if self._stop_reason is None:
            self._stop_reason = reason
        event = self._stop_event
        if event is not None:
            event.set()

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`; return True early if the job was asked to stop."""
        if self._stop_event is None:
            self._stop_event = threading.Event()
        if self._stop_reason is not None:  # a stop requested before the event existed
            return True
        return self._stop_event.wait(seconds)

    def check_stop(self) -> None:
        """Raise `Interrupted` if the job was asked to stop."""
        if self._stop_reason is not None:
            raise Interrupted(f"stopped: {self._stop_reason}")

    def heartbeat(self) -> None:
        """Ask the worker to extend this job's lease now (it also does so every lease/4)."""
        self._request_heartbeat()

    def enqueue(self, type: str, payload: dict[str, Any] | None = None, **options: Any) -> NewJob:
        """Enqueue a child job, committed together with this job's completion."""
        child = self._build_child(type, payload, parent_id=self.job.id, **options)
        self.children.append(child)
        return child
