"""The executor threads of a worker: each begins attempts and runs their handlers.

An executor takes a claimed attempt from the ready queue, asks `InFlight` to
begin it (refused once the loop released or cancelled it), records its start
in a start-slot entry that stays the attempt's until its outcome committed (or,
without slots, waits until the loop's group commit made its start marker
durable: DESIGN §6, crash accounting), runs the handler and
reports the outcome, beginning its next attempt in the same step (without
slots, so that attempt's start marker rides in the commit of this outcome). An
executor whose handler outlived its stop grace is replaced by a fresh thread;
the old one ends once its handler returns.
"""

from __future__ import annotations

import logging
import queue as stdqueue
import threading

from jobcore.attempt import AttemptRunner, describe_error
from jobcore.inflight import Attempt, InFlight
from jobcore.models import Failed, Lease, Outcome, replace_job
from jobcore.queue import Queue
from jobcore.start_slots import StartSlots

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
        self.slots: StartSlots | None = None  # `open_slots`: executors note their starts

    def spawn(self) -> None:
        thread = threading.Thread(target=self._main, name="jobcore-executor", daemon=True)
        self._threads.add(thread)
        thread.start()

    def open_slots(self, worker: str) -> None:
        """Note starts in start slots when the store offers them (`jobcore.start_slots`);
        otherwise the loop marks each start in a group commit before its handler begins."""
        opener = getattr(self.queue.storage, "start_slots", None)
        self.slots = opener(worker) if opener is not None else None
        self.inflight.self_noting = self.slots is not None
        self.inflight.free_entry = self.slots.free if self.slots is not None else None
        self.inflight.clear_entry = self.slots.clear if self.slots is not None else None

    def submit(self, attempt: Attempt) -> None:
        self._ready.put(attempt)

    def stop(self) -> None:
        """Ask every executor to end once it is idle (running handlers are not waited for)."""
        self._stopped = True  # one waiting for a start marker gives up: the loop is gone
        for _ in list(self._threads):
            self._ready.put(None)
        if self.slots is not None:
            self.slots.close()  # a stop is no crash: what it names is charged to nobody

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
            if self.slots is not None:
                self._note(attempt)
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

    def _note(self, attempt: Attempt) -> None:
        """Record the start in a start-slot entry before the handler may begin; the entry
        stays this attempt's until it is done (`InFlight.remove`), not just until this
        executor begins its next one: an outcome may wait for its commit meanwhile."""
        assert self.slots is not None
        lease = attempt.lease
        started_ms = self.queue.storage.now()
        entry = self.slots.note(lease.lease_id, started_ms)
        if entry is not None:
            if lease.job is not None:  # its outcome's statement records when it began
                job = replace_job(lease.job, started_at=started_ms)
                attempt.lease = Lease(lease.job_id, lease.lease_id, lease.worker, job)
            self.inflight.noted(attempt, entry)
        else:
            self.inflight.needs_marker(attempt)

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
