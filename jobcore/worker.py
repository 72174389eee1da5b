"""The worker: one loop thread owns every database write; executor threads run handlers.

Each loop iteration records the outcomes the executors reported and claims
new jobs for the free slots in a single transaction (group commit), then
waits until an outcome arrives, an in-process enqueue wakes it, another
process commits (`Storage.wait_for_change`), or a timer (poll, heartbeat, sweep,
timeout, next scheduled job) is due.
"""

from __future__ import annotations

import logging
import os
import queue as stdqueue
import signal
import socket
import threading
import time
from collections.abc import Callable
from functools import partial
from types import FrameType
from typing import Any

from jobcore import wakeup
from jobcore.attempt import AttemptRunner, Running, describe_error
from jobcore.context import JobContext
from jobcore.errors import InvalidPayload, JobcoreError, JobTimeout, StorageError
from jobcore.models import (
    Cancelled,
    Completed,
    Failed,
    Job,
    Lease,
    Outcome,
    Released,
    Retrying,
)
from jobcore.plugins import notify
from jobcore.queue import Queue
from jobcore.storage.base import Recorded
from jobcore.timeutil import now_ms

log = logging.getLogger("jobcore.worker")

MAX_DB_BACKOFF = 30.0


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"


class Worker:
    """Claims and runs jobs from one `Queue` until stopped.

    `until_empty` exits once nothing runnable remains and nothing is in flight;
    `max_jobs` exits after finishing that many attempts. Signal handlers
    (SIGINT/SIGTERM: graceful shutdown, a second one shortens it) are installed
    only when `install_signal_handlers` is true and this is the main thread.
    """

    def __init__(
        self,
        queue: Queue,
        *,
        concurrency: int | None = None,
        prefetch: int | None = None,
        queues: tuple[str, ...] = (),
        types: tuple[str, ...] = (),
        lease: float | None = None,
        poll_interval: float | None = None,
        shutdown_timeout: float | None = None,
        worker_id: str | None = None,
        until_empty: bool = False,
        max_jobs: int | None = None,
        install_signal_handlers: bool = False,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        core = queue.config.core
        self.queue = queue
        self.pm = queue.pm
        self.worker_id = worker_id or default_worker_id()
        self.concurrency = concurrency or core.concurrency
        # Claim up to `prefetch` jobs beyond the executors, but only while recent attempts
        # are short: long jobs waiting in one worker would starve idle ones.
        self.prefetch = core.prefetch if prefetch is None else prefetch
        self.prefetch_below_ms = core.prefetch_below * 1000
        self._recent_ms: float | None = None  # moving average of attempt durations
        self.queues = queues
        unknown = [name for name in types if name not in queue.registry]
        if unknown:
            raise JobcoreError(f"this worker has no handler for job type(s): {', '.join(unknown)}")
        # Claim only types this process can run; others stay for workers that can.
        self.types = types or tuple(sorted(t.name for t in queue.registry))
        self.lease = lease or core.lease
        self.poll_interval = poll_interval or core.poll_interval
        self.wake_check_interval = core.wake_check_interval
        self.shutdown_timeout = (
            core.shutdown_timeout if shutdown_timeout is None else shutdown_timeout
        )
        self.until_empty = until_empty
        self.max_jobs = max_jobs
        self.install_signal_handlers = install_signal_handlers
        self.clock = clock
        self.claim_batch = core.claim_batch
        self.attempts = AttemptRunner(queue, clock=clock, max_result_bytes=core.max_result_bytes)

        self._cond = threading.Condition()
        self._reported: list[tuple[Running, Outcome]] = []  # from executors, under _cond
        self._unrecorded: list[tuple[Running, Outcome]] = []  # loop-owned, awaiting commit
        self._woken = True
        self._external_change = False  # set by _wait when another connection committed
        self._heartbeat_requested = False
        self._running: dict[str, Running] = {}
        self._ready: stdqueue.SimpleQueue[Running | None] = stdqueue.SimpleQueue()
        self._executors: set[threading.Thread] = set()
        self._notices: stdqueue.SimpleQueue[list[Callable[[], None]] | None] = (
            stdqueue.SimpleQueue()
        )
        self._batch: list[Callable[[], None]] = []  # notifications of the current iteration
        self._notifier: threading.Thread | None = None
        self._stopping = False
        self._stop_deadline: float | None = None
        self._maybe_more = True
        self._next_due: float | None = None  # monotonic time the earliest scheduled job is due
        self._claimed_total = 0
        self.finished = 0  # attempts whose outcome was committed
        self.exit_code = 0
        self.stats: dict[str, int] = {
            "completed": 0,
            "retrying": 0,
            "failed": 0,
            "cancelled": 0,
            "released": 0,
        }

    # -- control -----------------------------------------------------------------

    def stop(self, *, graceful: bool = True) -> None:
        """Stop claiming; wait up to shutdown_timeout for running jobs (0 if not graceful)."""
        with self._cond:
            now = time.monotonic()
            if not self._stopping:
                self._stopping = True
                self._stop_deadline = now + (self.shutdown_timeout if graceful else 0.0)
            else:
                self._stop_deadline = now  # a second request shortens the wait
            self._cond.notify_all()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        log.warning(
            "received %s: %s",
            signal.Signals(signum).name,
            "stopping now"
            if self._stopping
            else f"finishing running jobs (up to {self.shutdown_timeout:g}s; again to stop now)",
        )
        self.stop(graceful=not self._stopping)

    def wake(self) -> None:
        with self._cond:
            self._woken = True
            self._cond.notify_all()

    def _request_heartbeat(self) -> None:
        with self._cond:
            self._heartbeat_requested = True
            self._cond.notify_all()

    # -- executors ---------------------------------------------------------------

    def _spawn_executor(self) -> None:
        thread = threading.Thread(target=self._executor_main, name="jobcore-executor", daemon=True)
        self._executors.add(thread)
        thread.start()

    def _executor_main(self) -> None:
        while True:
            run = self._ready.get()
            if run is None:
                return
            with self._cond:
                if run.abandoned:  # released or lost before it began
                    continue
                run.began = True
            outcome = self.attempts.execute(run)
            with self._cond:
                if run.abandoned:
                    log.info(
                        "job %s finished after it was given up (%s); outcome dropped",
                        run.job.id,
                        run.ctx.stop_reason,
                    )
                    self._executors.discard(threading.current_thread())
                    return  # a replacement executor already took this slot
                self._reported.append((run, outcome))
                self._cond.notify_all()

    # -- the loop ------------------------------------------------------------------

    def run(self) -> int:
        """Run until stopped; returns the process exit code (0 on a clean stop)."""
        key = self.queue.wake_key
        wakeup.subscribe(key, self.wake)
        previous_handlers = self._install_signals()
        self._notifier = threading.Thread(
            target=self._notifier_main, name="jobcore-notifier", daemon=True
        )
        self._notifier.start()
        for _ in range(self.concurrency):
            self._spawn_executor()
        self._announce("jobcore_worker_started", worker=self.worker_id, queue=self.queue)
        log.info(
            "worker %s started: concurrency %d, types %s, queues %s",
            self.worker_id,
            self.concurrency,
            ",".join(self.types),
            ",".join(self.queues) or "all",
        )
        try:
            if self._ready_database():
                self._loop()
        finally:
            wakeup.unsubscribe(key, self.wake)
            self._restore_signals(previous_handlers)
            for _ in list(self._executors):
                self._ready.put(None)
            self._announce("jobcore_worker_stopped", worker=self.worker_id)
            self._flush_notices()
            self._notices.put(None)
            self._notifier.join(timeout=10)
            log.info(
                "worker %s stopped: %s",
                self.worker_id,
                ", ".join(f"{k} {v}" for k, v in self.stats.items() if v) or "no jobs",
            )
        return self.exit_code

    def _ready_database(self) -> bool:
        """Create or migrate the schema, backing off while the database is unavailable."""
        backoff = 0.0
        while True:
            try:
                self.queue.storage.migrate()
                return True
            except StorageError:
                raise  # not transient: a newer schema, not a database, no such folder
            except Exception as exc:
                backoff = min(MAX_DB_BACKOFF, max(0.1, backoff * 2))
                log.error(
                    "database error at start (%s); retrying in %.1fs", describe_error(exc), backoff
                )
                if self._stopping:
                    self.exit_code = 1
                    return False
                self._sleep(backoff)

    def _loop(self) -> None:
        storage = self.queue.storage
        lease_s = self.lease
        next_heartbeat = time.monotonic() + lease_s / 4
        next_sweep = time.monotonic()
        next_poll = 0.0
        db_backoff = 0.0
        while True:
            with self._cond:
                self._unrecorded.extend(self._reported)
                self._reported.clear()
                woken, self._woken = self._woken, False
                heartbeat_now, self._heartbeat_requested = self._heartbeat_requested, False
                stopping, stop_deadline = self._stopping, self._stop_deadline
            mono = time.monotonic()
            try:
                self._check_timeouts(mono)
                if stopping:
                    self._release_waiting()
                if stopping and stop_deadline is not None and mono >= stop_deadline:
                    self._release_all()
                free = self._free_slots(stopping)
                # Another connection committed: maybe new work, maybe a cancel request.
                changed, self._external_change = self._external_change, False
                changed = changed or (
                    (free > 0 or bool(self._running)) and storage.wait_for_change(0)
                )
                if changed and self._running:
                    self._check_cancels()
                # Scheduled jobs can only have become due by the clock or by others' writes.
                full_poll = (
                    woken
                    or changed
                    or mono >= next_poll
                    or (self._next_due is not None and mono >= self._next_due)
                )
                want_claim = free > 0 and (full_poll or self._maybe_more or bool(self._unrecorded))
                if self._unrecorded or want_claim:
                    claimed = self._commit(free if want_claim else 0, promote=full_poll)
                    if want_claim:
                        self._maybe_more = claimed == min(free, self.claim_batch) and claimed > 0
                    if want_claim and full_poll:
                        next_poll = mono + self.poll_interval
                        due = storage.next_due()
                        self._next_due = (
                            None if due is None else mono + max(0, due - self.clock()) / 1000
                        )
                if heartbeat_now or mono >= next_heartbeat:
                    self._heartbeat()
                    next_heartbeat = mono + lease_s / 4
                if mono >= next_sweep:
                    for item in storage.sweep(hold_ms=int(lease_s * 500)):
                        self._batch.append(partial(self.queue.announce_swept, item))
                    next_sweep = mono + lease_s / 2
                db_backoff = 0.0
            except Exception as exc:  # database trouble: back off, keep outcomes, recover
                db_backoff = min(MAX_DB_BACKOFF, max(0.1, db_backoff * 2))
                log.error(
                    "database error (%s); retrying in %.1fs",
                    describe_error(exc),
                    db_backoff,
                    exc_info=not isinstance(exc, StorageError) and db_backoff == 0.1,
                )
                if stopping and stop_deadline is not None and time.monotonic() >= stop_deadline:
                    log.error(
                        "stopping with %d outcome(s) unrecorded; their leases will expire "
                        "and the jobs will run again",
                        len(self._unrecorded),
                    )
                    self.exit_code = 1
                    return
                self._flush_notices()
                self._sleep(db_backoff)
                continue
            self._flush_notices()
            if self._done(stopping):
                return
            self._wait(next_heartbeat, next_sweep, next_poll, self._next_due)

    def _free_slots(self, stopping: bool) -> int:
        if stopping:
            return 0
        short = self._recent_ms is not None and self._recent_ms < self.prefetch_below_ms
        free = self.concurrency + (self.prefetch if short else 0) - len(self._running)
        if self.max_jobs is not None:
            free = min(free, self.max_jobs - self._claimed_total)
        return max(0, free)

    def _done(self, stopping: bool) -> bool:
        if self._running or self._unrecorded:
            return False
        with self._cond:
            if self._reported:
                return False
        if stopping:
            return True
        if self.max_jobs is not None and self.finished >= self.max_jobs:
            return True
        return self.until_empty and not self._maybe_more

    def _wait(self, *deadlines: float | None) -> None:
        """Sleep until a deadline, an in-process event, or another connection's commit.

        Other connections' commits are looked for every `wake_check_interval`
        in this tight inner loop (one `Storage.wait_for_change(0)` call each), so an idle
        worker costs little CPU yet notices new work within milliseconds.
        """
        until = min(min(d for d in deadlines if d is not None), self._next_timeout())
        if self._stopping and self._stop_deadline is not None:
            until = min(until, self._stop_deadline)
        free = self._free_slots(self._stopping)
        if free > 0 and self._maybe_more:
            return  # the last claim was full: there is probably more to claim right away
        watch = free > 0 or bool(self._running)
        changed = partial(self.queue.storage.wait_for_change, 0)
        cond = self._cond
        while True:
            with cond:
                if self._reported or self._woken or self._heartbeat_requested:
                    return
                remaining = until - time.monotonic()
                if remaining <= 0:
                    return
                if cond.wait(min(remaining, self.wake_check_interval) if watch else remaining):
                    return  # notified: an outcome, a wake-up, a heartbeat or a stop request
            if watch and changed():
                self._external_change = True
                return

    def _sleep(self, seconds: float) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._stopping and not self._running, timeout=seconds)

    def _next_timeout(self) -> float:
        deadlines = [run.deadline for run in self._running.values() if run.deadline is not None]
        return min(deadlines, default=float("inf"))

    # -- database steps ------------------------------------------------------------

    def _commit(self, claim_limit: int, *, promote: bool) -> int:
        """Record pending outcomes and claim up to `claim_limit` jobs in one transaction."""
        batch = self._unrecorded
        recorded, claimed = self.queue.storage.commit_batch(
            [outcome for _, outcome in batch],
            worker=self.worker_id,
            claim_limit=min(claim_limit, self.claim_batch),
            lease_ms=int(self.lease * 1000),
            queues=self.queues,
            types=self.types,
            promote=promote,
        )
        self._unrecorded = []
        for (run, _), answer in zip(batch, recorded, strict=True):
            self._after_record(run, answer)
        for job in claimed:
            self._start(job)
        return len(claimed)

    def _after_record(self, run: Running, answer: Recorded) -> None:
        if self._running.get(run.job.id) is run:
            del self._running[run.job.id]
        self.finished += 1
        if run.began and not run.abandoned:
            recent = self._recent_ms
            self._recent_ms = (
                run.duration_ms if recent is None else 0.9 * recent + 0.1 * run.duration_ms
            )
        job = answer.job
        if job is None:
            log.warning(
                "stale report for job %s (lease %s) ignored: its lease was lost",
                run.job.id,
                run.lease.lease_id,
            )
            return
        for child in answer.children:
            if child.created:
                self._announce("jobcore_job_enqueued", job=child.job)
        match answer.outcome:
            case Completed():
                self.stats["completed"] += 1
                self._announce("jobcore_job_completed", job=job, duration_ms=run.duration_ms)
            case Retrying(error=error):
                self.stats["retrying"] += 1
                due = time.monotonic() + max(0, job.run_at - self.clock()) / 1000
                self._next_due = due if self._next_due is None else min(self._next_due, due)
                self._announce("jobcore_job_retrying", job=job, error=error)
            case Failed(error=error):
                self.stats["failed"] += 1
                self._announce("jobcore_job_failed", job=job, error=error)
            case Cancelled():
                self.stats["cancelled"] += 1
                self._announce("jobcore_job_cancelled", job=job)
            case Released():
                self.stats["released"] += 1
                log.info("released job %s back to pending (attempt given back)", job.id)

    def _start(self, job: Job) -> None:
        self._claimed_total += 1
        lease = Lease.of(job)
        job_type = self.queue.job_type(job.type)
        ctx = JobContext(
            job=job,
            job_type=job_type,
            payload=None,
            worker=self.worker_id,
            config=self.queue.config,
            build_child=self.queue.build,
            request_heartbeat=self._request_heartbeat,
        )
        run = Running(job=job, ctx=ctx, lease=lease, deadline=None)  # set when the handler starts
        self._running[job.id] = run
        self._announce("jobcore_job_claimed", job=job, worker=self.worker_id)
        try:
            ctx.payload = self.queue.validate_payload(job_type, job.payload)
        except InvalidPayload as exc:  # stored payload no longer matches the model
            with self._cond:
                self._reported.append((run, Failed(lease=lease, error=str(exc))))
            return
        self._ready.put(run)

    def _check_timeouts(self, mono: float) -> None:
        for run in list(self._running.values()):
            if run.deadline is None or mono < run.deadline or run.abandoned:
                continue
            seconds = (run.job.timeout_ms or 0) / 1000
            error = f"timed out after {seconds:g}s"
            run.ctx.request_stop("timeout")
            self._abandon(run)
            outcome = self.attempts.retry_or_fail(run, JobTimeout(error), f"JobTimeout: {error}")
            run.duration_ms = seconds * 1000
            self._unrecorded.append((run, outcome))
            log.warning(
                "job %s (%s) %s; its handler was asked to stop", run.job.id, run.job.type, error
            )

    def _abandon(self, run: Running) -> None:
        """Give up on a running handler: its slot goes to a fresh executor thread."""
        with self._cond:
            run.abandoned = True
            run.deadline = None
            began = run.began
        if began and not self._stopping:
            self._spawn_executor()

    def _release_waiting(self) -> None:
        """Give back prefetched jobs no executor has begun (stopping: they will not start)."""
        for run in list(self._running.values()):
            with self._cond:
                if run.began or run.abandoned:
                    continue
                run.abandoned = True
            self._unrecorded.append((run, Released(lease=run.lease)))

    def _release_all(self) -> None:
        for run in list(self._running.values()):
            if run.abandoned:
                continue
            run.ctx.request_stop("shutdown")
            self._abandon(run)
            self._unrecorded.append((run, Released(lease=run.lease)))
        with self._cond:  # outcomes already reported still count
            self._unrecorded.extend(self._reported)
            self._reported.clear()

    def _check_cancels(self) -> None:
        for job_id in self.queue.storage.cancel_requested(self.worker_id):
            run = self._running.get(job_id)
            if run is not None and run.ctx.stop_reason is None:
                log.info("cancel requested for running job %s; asking it to stop", job_id)
                run.ctx.request_stop("cancel")

    def _heartbeat(self) -> None:
        runs = [run for run in self._running.values() if not run.abandoned]
        if not runs:
            return
        owned = self.queue.storage.extend_leases(
            [run.lease for run in runs], lease_ms=int(self.lease * 1000)
        )
        for run in runs:
            if run.job.id not in owned:
                log.error(
                    "lost the lease of job %s (lease %s); stopping it",
                    run.job.id,
                    run.lease.lease_id,
                )
                run.ctx.request_stop("lease lost")
                self._abandon(run)
                del self._running[run.job.id]
            elif owned[run.job.id]:
                run.ctx.request_stop("cancel")

    # -- notifications -------------------------------------------------------------
    # Hooks run on one notifier thread, in commit order, so a slow observer
    # never holds up claims or outcome commits.

    def _announce(self, hook_name: str, **kwargs: Any) -> None:
        """Queue a notification; `_flush_notices` hands the batch to the notifier thread."""
        self._batch.append(partial(notify, self.pm, hook_name, **kwargs))

    def _flush_notices(self) -> None:
        if self._batch:
            self._notices.put(self._batch)
            self._batch = []

    def _notifier_main(self) -> None:
        while True:
            calls = self._notices.get()
            if calls is None:
                return
            for call in calls:
                try:
                    call()
                except Exception:  # notify() already isolates hooks; this is a last guard
                    log.exception("notification failed")

    # -- signals ---------------------------------------------------------------

    def _install_signals(self) -> dict[int, Any]:
        if (
            not self.install_signal_handlers
            or threading.current_thread() is not threading.main_thread()
        ):
            return {}
        previous: dict[int, Any] = {}
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, self._on_signal)
        return previous

    def _restore_signals(self, previous: dict[int, Any]) -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


__all__ = ["Worker"]
