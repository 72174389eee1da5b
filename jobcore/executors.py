"""The executor threads of a worker: each begins attempts and runs their handlers.

An executor takes a claimed attempt from the ready queue, asks `InFlight` to
begin it (refused once the loop released or cancelled it), waits until the
loop's group commit made its start durable (DESIGN §6, crash accounting), runs
the handler and reports the outcome, beginning its next attempt in the same
step so that attempt's start marker rides in the commit of this outcome. An
executor whose handler outlived its stop grace is replaced by a fresh thread;
the old one ends once its handler returns.
"""

from __future__ import annotations

import logging
import queue as stdqueue
import threading

from jobcore.attempt import AttemptRunner, describe_error
from jobcore.inflight import Attempt, InFlight
from jobcore.models import Failed, Outcome
from jobcore.queue import Queue

log = logging.getLogger("jobcore.worker")

RECHECK = 1.0  # seconds: a waiting executor looks at its attempt again at least this often


class Executors:
    """The pool of executor threads fed by one ready queue."""

    def __init__(self, queue: Queue, inflight: InFlight, attempts: AttemptRunner) -> None:
        self.queue = queue  # its storage opens lazily, at the worker's start
        self.inflight = inflight
        self.attempts = attempts
        self._ready: stdqueue.SimpleQueue[Attempt | None] = stdqueue.SimpleQueue()
        self._threads: set[threading.Thread] = set()
        self._stopped = False

    def spawn(self) -> None:
        thread = threading.Thread(target=self._main, name="jobcore-executor", daemon=True)
        self._threads.add(thread)
        thread.start()

    def submit(self, attempt: Attempt) -> None:
        self._ready.put(attempt)

    def stop(self) -> None:
        """Ask every executor to end once it is idle (running handlers are not waited for)."""
        self._stopped = True  # one waiting for a start marker gives up: the loop is gone
        for _ in list(self._threads):
            self._ready.put(None)

    def _main(self) -> None:
        """Begin attempts and report their outcomes; never dies while the worker runs."""
        waiter = threading.Event()
        begun: Attempt | None = None  # begun with the previous report
        while True:
            if begun is None:
                attempt = self._ready.get()
                if attempt is None:
                    return
                if not self.inflight.begin(attempt, waiter):
                    continue  # released or cancelled before it began
            else:
                attempt, begun = begun, None
            if not self._started(attempt, waiter):
                continue  # given back, cancelled or lost before its start was marked
            try:
                outcome: Outcome = self.attempts.execute(attempt)
            except BaseException as exc:  # execute() never raises; this is the last guard
                outcome = Failed(lease=attempt.lease, error=describe_error(exc))
            then = self._next_ready()
            reported, took = self.inflight.report(attempt, outcome, then, waiter)
            if then is not None and not took:
                if reported:
                    continue  # `then` was released or cancelled meanwhile
                self._ready.put(then)  # not begun: for another executor, or this one
            if took:
                begun = then
                continue
            if not reported:
                log.info(
                    "job %s finished after it was given up (%s); outcome dropped",
                    attempt.job.id,
                    attempt.ctx.stop_reason,
                )
                if attempt.replaced:
                    return  # a fresh executor took this slot

    def _next_ready(self) -> Attempt | None:
        """The next attempt if one is ready now (a stop request is put back for `_main`)."""
        try:
            then = self._ready.get_nowait()
        except stdqueue.Empty:
            return None
        if then is None:
            self._ready.put(None)
        return then

    def _started(self, attempt: Attempt, waiter: threading.Event) -> bool:
        """Wait until the attempt's start marker committed (True) or the loop let it go."""
        while True:
            state = self.inflight.start(attempt)
            if state is not None:
                return state
            if self._stopped:
                return False
            waiter.wait(RECHECK)
            waiter.clear()
