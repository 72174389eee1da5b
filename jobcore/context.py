"""What a handler receives besides its payload."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from jobcore.errors import Interrupted, JobcoreError
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
        self._on_stop: list[Callable[[str], None]] | None = None  # see `on_stop`
        self._judged = False  # its handler ended: see `enqueue`

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
        first = self._stop_reason is None
        if first:
            self._stop_reason = reason
        event = self._stop_event
        if event is not None:
            event.set()
        if first and self._on_stop is not None:
            for callback in list(self._on_stop):
                try:
                    callback(reason)
                except Exception:  # the caller is the worker's loop: it must go on
                    logging.getLogger("jobcore.worker").exception(
                        "job %s: a stop callback failed", self.job.id
                    )

    def on_stop(self, callback: Callable[[str], None]) -> None:
        """Call `callback(reason)` from the thread that asks this attempt to stop (once, at
        the first request; at once if it was asked already). It must not block; it may be
        called twice when registered at the moment of the request."""
        if self._on_stop is None:
            self._on_stop = []
        self._on_stop.append(callback)
        reason = self._stop_reason
        if reason is not None:
            callback(reason)

    async def stopped(self) -> str:
        """For `async def` handlers: wait until the job is asked to stop (shutdown, cancel,
        timeout, lost lease) and return why. Beside `should_stop`; never blocks the loop."""
        if self._stop_reason is None:
            loop = asyncio.get_running_loop()
            asked: asyncio.Future[None] = loop.create_future()

            def wake(_: str) -> None:
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                    loop.call_soon_threadsafe(_settle, asked)

            self.on_stop(wake)
            await asked
        return self._stop_reason or "shutdown"

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
        """Ask the worker to extend this job's lease (it also does so every lease/4).

        Calls coalesce: the lease is extended at once, or lease/20 after the previous
        extension, so calling this for every item a handler processes costs no more."""
        self._request_heartbeat()

    def judged(self) -> tuple[NewJob, ...]:
        """Its handler ended: the children to commit with its completion; no more after."""
        self._judged = True
        return tuple(self.children)

    def enqueue(self, type: str, payload: dict[str, Any] | None = None, **options: Any) -> NewJob:
        """Enqueue a child job, committed together with this job's completion.

        Only while the handler runs: once it ended (a background task or thread it left
        behind calls this later), the child could no longer be committed with it, so
        this raises rather than losing the job silently.
        """
        if self._judged:
            raise JobcoreError(
                f"ctx.enqueue({type!r}) after job {self.job.id}'s handler ended: the child "
                "would be lost; enqueue children before the handler returns, or use a "
                "Queue/AsyncQueue for work that outlives it"
            )
        child = self._build_child(type, payload, parent_id=self.job.id, **options)
        self.children.append(child)
        return child


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
