"""The executor threads of a worker: each begins attempts and runs their handlers.

An executor takes a claimed attempt from the ready queue, asks `InFlight` to
begin it (refused once the loop released or cancelled it), makes its start
durable first when the job may be one that kills its worker, runs the handler
and reports the outcome. An executor whose handler outlived its stop grace is
replaced by a fresh thread; the old one ends once its handler returns.
"""

from __future__ import annotations

import logging
import queue as stdqueue
import threading

from jobcore.attempt import AttemptRunner, describe_error
from jobcore.inflight import Attempt, InFlight
from jobcore.models import Failed, Outcome, Released
from jobcore.queue import Queue

log = logging.getLogger("jobcore.worker")


class Executors:
    """The pool of executor threads fed by one ready queue."""

    def __init__(self, queue: Queue, inflight: InFlight, attempts: AttemptRunner) -> None:
        self.queue = queue  # its storage opens lazily, at the worker's start
        self.inflight = inflight
        self.attempts = attempts
        self._ready: stdqueue.SimpleQueue[Attempt | None] = stdqueue.SimpleQueue()
        self._threads: set[threading.Thread] = set()

    def spawn(self) -> None:
        thread = threading.Thread(target=self._main, name="jobcore-executor", daemon=True)
        self._threads.add(thread)
        thread.start()

    def submit(self, attempt: Attempt) -> None:
        self._ready.put(attempt)

    def stop(self) -> None:
        """Ask every executor to end once it is idle (running handlers are not waited for)."""
        for _ in list(self._threads):
            self._ready.put(None)

    def _main(self) -> None:
        """Begin attempts and report their outcomes; never dies while the worker runs."""
        while True:
            attempt = self._ready.get()
            if attempt is None:
                return
            if not self.inflight.begin(attempt):
                continue  # released or cancelled before it began
            try:
                if attempt.durable_start and not self._mark_durably(attempt):
                    outcome: Outcome = Released(lease=attempt.lease)
                else:
                    outcome = self.attempts.execute(attempt)
            except BaseException as exc:  # execute() never raises; this is the last guard
                outcome = Failed(lease=attempt.lease, error=describe_error(exc))
            if not self.inflight.report(attempt, outcome):
                log.info(
                    "job %s finished after it was given up (%s); outcome dropped",
                    attempt.job.id,
                    attempt.ctx.stop_reason,
                )
                if attempt.replaced:
                    return  # a fresh executor took this slot

    def _mark_durably(self, attempt: Attempt) -> bool:
        """Commit the start marker before the handler runs; False: give the job back."""
        try:
            held = self.queue.storage.mark_started([attempt.lease])
        except Exception as exc:
            log.error(
                "job %s: could not record its start (%s); giving it back",
                attempt.job.id,
                describe_error(exc),
            )
            return False
        attempt.start_marked = attempt.job.id in held
        return attempt.start_marked
