"""The worker: one loop thread owns every attempt's life; executors run handlers.

Each loop iteration takes what the executors reported, decides what the clock
and requests ask for (timeouts, stop graces, shutdown, cancels, prefetched jobs
that waited too long), then records every decided outcome and claims new jobs
for the free slots in a single transaction (group commit), and waits until an
executor reports, an in-process enqueue wakes it, another process commits, or
a timer is due. A keeper thread on its own connection extends leases and
sweeps, so neither waits behind the outcome writer. See `jobcore.inflight` for
the phases of an attempt.

The parts: `jobcore.executors` (handler threads), `jobcore.supervisor`
(timeouts, graces, give-backs, cancels, lost leases), `jobcore.group_commit`
(outcomes + claim in one transaction, refused batches recorded apart),
`jobcore.keeper` (heartbeats and sweep) and `jobcore.notifier` (hooks).
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
from typing import Any

from jobcore import operating, signals, startup, wakeup
from jobcore.async_loop import MixedExecutors, abandoned, claim_room, executors_for
from jobcore.attempt import AttemptRunner, describe_error
from jobcore.context import JobContext
from jobcore.errors import JobcoreError, StorageError
from jobcore.group_commit import GroupCommit, is_transient
from jobcore.inflight import Attempt, InFlight, Phase
from jobcore.keeper import MAX_DB_BACKOFF, Keeper
from jobcore.limits import check_arguments
from jobcore.models import Cancelled, Completed, Failed, Job, JobStatus, Lease, Released, Retrying
from jobcore.notifier import Notifier
from jobcore.promotion import PromotionClock
from jobcore.queue import Queue
from jobcore.registry import JobType, Payload
from jobcore.storage import powers
from jobcore.storage.base import Recorded
from jobcore.supervisor import Supervisor

log = logging.getLogger("jobcore.worker")

GATHER = 0.002  # seconds: the longest wait for short handlers to report before a commit


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"


def _unstartable(payload: Any, ctx: Any) -> None:  # pragma: no cover - never called
    raise JobcoreError(f"no handler for job type {ctx.job.type!r}")


class Worker:
    """Claims and runs jobs from one `Queue` until stopped.

    `until_empty` exits once nothing runnable remains and nothing is in flight;
    `max_jobs` exits after that many attempts ended (run, timed out or lost).
    Signal handlers (SIGINT/SIGTERM: graceful shutdown, a second one shortens
    it) are installed only when `install_signal_handlers` is true and this is
    the main thread.
    """

    def __init__(
        self,
        queue: Queue,
        *,
        concurrency: int | None = None,
        async_concurrency: int | None = None,  # `async def` handlers: `jobcore.async_loop`
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
    ) -> None:
        core = queue.config.core
        check_arguments(lease=lease, poll_interval=poll_interval)
        check_arguments(positive=False, shutdown_timeout=shutdown_timeout)
        self.queue = queue
        self.pm = queue.pm
        self.worker_id = worker_id or default_worker_id()
        self.concurrency = concurrency or core.concurrency
        # Claim up to `prefetch` jobs beyond the executors, but only while attempts are
        # short; a prefetched job waiting longer than `prefetch_wait` is given back. Set
        # nowhere, it is the store's `default_prefetch` if it has one (PostgreSQL: a
        # trip to the server costs more per commit, so larger batches pay off).
        if prefetch is None:
            prefetch = core.prefetch
            if "prefetch" not in core.model_fields_set:
                prefetch = powers.default_prefetch(queue.storage, prefetch)
        self.prefetch = prefetch
        self.prefetch_below_ms = core.prefetch_below * 1000
        self.prefetch_wait = core.prefetch_wait
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
        self.stop_grace = core.stop_grace
        self.until_empty = until_empty
        self.max_jobs = max_jobs
        self.install_signal_handlers = install_signal_handlers
        self.claim_batch = core.claim_batch
        self.attempts = AttemptRunner(
            queue,
            max_result_bytes=core.max_result_bytes,
            max_retry_delay=core.max_retry_delay,
        )

        lock = threading.RLock()
        self._cond = threading.Condition(lock)
        self.inflight = InFlight(self._cond, lock)
        self._unrecorded: list[Attempt] = []  # loop-owned: reported, awaiting commit
        self._to_mark: list[Attempt] = []  # loop-owned: taken by executors, start unmarked
        self._committed_at = 0.0  # monotonic: when the loop's last commit ended
        self._woken = True
        self._external_change = False  # set by _wait when another connection committed
        self._writes: powers.WriteWatch = powers.Polling()  # when _wait looks for commits
        self.executors = executors_for(self, async_concurrency)
        self.notifier = Notifier(self.pm)
        self.keeper = Keeper(
            queue,
            self.inflight,
            self._cond,
            lease=self.lease,
            notifier=self.notifier,
            wake=self.wake,
        )
        self.supervisor = Supervisor(
            self.inflight,
            self.attempts,
            stop_grace=self.stop_grace,
            prefetch_wait=self.prefetch_wait,
            record=lambda attempt: self._unrecorded.append(attempt),
            finish=self._finish,
            replace_executor=self._replace_executor,
        )
        self.group_commit = GroupCommit(
            queue, worker=self.worker_id, lease=self.lease, queues=self.queues, types=self.types
        )
        self._stopping = self._stop_now = False  # _stop_now: asked twice, release jobs at once
        self._stop_deadline: float | None = None
        self._maybe_more = True
        self._children_added = False  # the last commit enqueued children (`_loop`)
        self.promotion = PromotionClock(queue.storage, self.poll_interval)
        self._slots = operating.SlotLook(queue, queues, self.types, self.poll_interval)  # §16
        self._db_backoff = 0.0
        self._file_check_at = 0.0  # monotonic: when to compare the database path with its file
        self._db_retry_at = 0.0  # monotonic: no database step in the loop before this
        self._claimed_total = 0
        self.finished = 0  # attempts that ended (recorded, or lost with their lease)
        self.exit_code = 0
        outcomes = ("completed", "retrying", "failed", "cancelled", "released")
        self.stats: dict[str, int] = dict.fromkeys(outcomes, 0)

    # -- control -----------------------------------------------------------------

    def stop(self, *, graceful: bool = True) -> None:
        """Stop claiming; wait up to shutdown_timeout for running jobs (0 if not graceful).

        A second request means now: running handlers are not waited for (no `stop_grace`);
        their jobs are released at once, and the worker exits.
        """
        with self._cond:
            now = time.monotonic()
            if not self._stopping:
                self._stopping = True
                self._stop_deadline = now + (self.shutdown_timeout if graceful else 0.0)
            else:
                self._stop_deadline = now
                self._stop_now = True
            self._woken = True
            self._cond.notify_all()

    @property
    def stopping(self) -> bool:
        """A stop was asked for (a signal or `stop`)."""
        return self._stopping

    def wake(self) -> None:
        with self._cond:
            self._woken = True
            self._cond.notify_all()

    # -- the loop ------------------------------------------------------------------

    def run(self) -> int:
        """Run until stopped; returns the process exit code (0 on a clean stop)."""
        key = self.queue.wake_key
        wakeup.subscribe(key, self.wake)
        previous_handlers = (
            signals.install(
                lambda graceful: self.stop(graceful=graceful),
                lambda: self._stopping,
                self.shutdown_timeout,
            )
            if self.install_signal_handlers
            else {}
        )
        try:  # no `started` line before the store answers (or the one `Error:` line)
            ready = startup.ready_store(
                self.queue.storage,
                wait=self.max_jobs is None and not self.until_empty,
                stopping=lambda: self._stopping,
                sleep=self._sleep,
            )
            if ready:  # its types' declared concurrency limits, for every claimer (§16)
                operating.declare_types(self.queue, self.types)
        except BaseException:
            wakeup.unsubscribe(key, self.wake)
            signals.restore(previous_handlers)
            raise
        if not ready:
            wakeup.unsubscribe(key, self.wake)
            signals.restore(previous_handlers)
            return 1
        self.executors.open_slots(self.worker_id)  # where executors note their starts
        self.notifier.start()
        for _ in range(self.concurrency):
            self.executors.spawn()
        self._announce("jobcore_worker_started", worker=self.worker_id, queue=self.queue)
        log.info(
            "worker %s started: concurrency %d, types %s, queues %s",
            self.worker_id,
            self.concurrency,
            ",".join(self.types),
            ",".join(self.queues) or "all",
        )
        try:
            self.keeper.start()
            self._writes = powers.write_watch(self.queue.storage, self._cond)
            self._loop()
        finally:
            self._writes.close()
            self.keeper.stop(timeout=max(10.0, self.queue.config.core.busy_timeout + 1))
            wakeup.unsubscribe(key, self.wake)
            signals.restore(previous_handlers)
            self.executors.stop()
            self._announce("jobcore_worker_stopped", worker=self.worker_id)
            self.notifier.stop(timeout=10)
            done = ", ".join(f"{k} {v}" for k, v in self.stats.items() if v) or "no jobs"
            log.info("worker %s stopped: %s", self.worker_id, done)
        return self.exit_code

    def _loop(self) -> None:
        storage = self.queue.storage
        promotion = self.promotion
        while True:
            with self._cond:
                inbox = self.inflight.take_inbox()
                self._to_mark.extend(self.inflight.take_began())
                news, self.keeper.news = self.keeper.news, []
                woken, self._woken = self._woken, False
                stopping, stop_deadline = self._stopping, self._stop_deadline
                now_please = self._stop_now
            mono = time.monotonic()
            for attempt in inbox:
                if attempt.phase is Phase.REPORTED:
                    self._unrecorded.append(attempt)
                else:  # its lease was lost while it ran: nothing to record
                    self._finish(attempt)
            for attempt, what in news:
                if what == "lost":
                    self.supervisor.lease_lost(attempt, mono)
                else:
                    self.supervisor.cancel(attempt)
            self.supervisor.check_timeouts(mono)
            self.supervisor.check_graces(mono)
            self.supervisor.check_waiting(mono, stopping)
            past_deadline = stopping and stop_deadline is not None and mono >= stop_deadline
            if past_deadline:
                self.supervisor.stop_started(mono, now=now_please)
            if mono >= self._file_check_at and not stopping:
                self._check_file(mono)
            if mono >= self._db_retry_at:
                try:
                    free = self._free_slots(stopping)
                    # Another connection committed: maybe new work, maybe a cancel request.
                    # A store that pushes changes may tell work apart from claims and
                    # outcomes (this loop's own commits among them): `wait_for_work`.
                    changed, self._external_change = self._external_change, False
                    look = powers.change_look(storage)
                    changed = changed or ((free > 0 or len(self.inflight) > 0) and look(0))
                    if changed and len(self.inflight):
                        for job_id in storage.cancel_requested(self.worker_id):
                            asked = self.inflight.get(job_id)
                            if asked is not None:
                                self.supervisor.cancel(asked)
                    # Scheduled jobs can only have become due by the clock or by others'
                    # writes: which claims promote them, `jobcore.promotion`.
                    full_poll = woken or changed or promotion.due(mono)
                    want_claim = free > 0 and (
                        full_poll or self._maybe_more or bool(self._unrecorded)
                    )
                    promote, ahead = promotion.choose(
                        mono, full_poll=full_poll, want_claim=want_claim
                    )
                    if self._unrecorded or want_claim or self._to_mark:
                        claimed = self._commit(
                            free if want_claim else 0, promote=promote, look_ahead=ahead
                        )
                        if want_claim:  # None: refused, nothing claimed nor looked at
                            self._maybe_more = claimed is None or (
                                claimed == min(free, self.claim_batch) and claimed > 0
                            )
                        # Children committed with their parent may be claimable now, though
                        # this commit's claim did not see them (PostgreSQL inserts them
                        # after it): look again before calling the queue empty.
                        self._maybe_more |= self._children_added
                        self._children_added = False
                        if want_claim and full_poll:
                            promotion.claimed(mono, promote=promote, ahead=ahead)
                    self._db_backoff = 0.0
                except Exception as exc:  # database trouble: back off, keep outcomes, recover
                    self._db_failed(exc)
                    if past_deadline and not self.inflight.in_phase(
                        Phase.CLAIMED, Phase.STARTING, Phase.STARTED, Phase.STOPPING
                    ):
                        log.error(
                            "stopping with %d outcome(s) unrecorded; their leases will expire "
                            "and the jobs will run again",
                            len(self._unrecorded),
                        )
                        self.exit_code = 1
                        self._flush_notices()
                        return
            self._flush_notices()
            if self._done(stopping):
                return
            self._wait(promotion.next_poll, promotion.next_due)

    def _check_file(self, mono: float) -> None:
        """Stop with an error once the database path names another file, or none (README)."""
        self._file_check_at = mono + self.poll_interval
        changed = getattr(self.queue.storage, "file_changed", None)
        reason = changed() if changed is not None else None
        if reason is not None:
            log.error("%s; stopping this worker: start it again to use the file now there", reason)
            self.exit_code = 1
            self.stop(graceful=False)

    def _db_failed(self, exc: BaseException) -> None:
        first = self._db_backoff == 0.0
        self._db_backoff = min(MAX_DB_BACKOFF, max(0.1, self._db_backoff * 2))
        self._db_retry_at = time.monotonic() + self._db_backoff
        log.error(
            "database error (%s); retrying in %.1fs",
            describe_error(exc),
            self._db_backoff,
            exc_info=first and not isinstance(exc, StorageError) and not is_transient(exc),
        )

    def _free_slots(self, stopping: bool) -> int:
        if stopping:
            return 0
        busy = len(self.inflight) - len(self._unrecorded)  # recorded now, their slots are free
        room = self._prefetch_room()
        free = self.concurrency + room - busy
        mixed = isinstance(self.executors, MixedExecutors)  # async slots: claimed apart
        if free < room // 2 and not mixed and self.inflight.waiting() >= self.concurrency:
            return 0  # a round of jobs waits already: claim once half the room is free
        free = claim_room(self.executors, self.group_commit, free, busy, self.types)  # async ones
        if self.max_jobs is not None:
            free = min(free, self.max_jobs - self._claimed_total)
        return max(0, free)

    def _prefetch_room(self) -> int:
        """Jobs to claim beyond the executors: `prefetch` while attempts are short, but no
        more than they start in half of `prefetch_wait` at the recent pace (the rest would
        wait too long, be given back and claimed again: churn). Claimed in batches of at
        least half of it while a round of jobs is waiting (fewer, larger claims)."""
        if self._recent_ms is None or not self._short():
            return 0
        pace = self.concurrency * self.prefetch_wait * 500 / max(self._recent_ms, 0.001)
        return min(self.prefetch, int(pace))

    def _short(self) -> bool:
        """Attempts are short: recently, and none running now has run long."""
        if self._recent_ms is None or self._recent_ms >= self.prefetch_below_ms:
            return False
        oldest = min((a.began_at for a in self.inflight.in_phase(Phase.STARTED)), default=None)
        return oldest is None or (time.monotonic() - oldest) * 1000 < self.prefetch_below_ms

    def _done(self, stopping: bool) -> bool:
        if len(self.inflight) or self._unrecorded:
            return False
        with self._cond:
            if self.inflight.has_news() or self.keeper.news:
                return False
        if stopping:
            return True
        if self.max_jobs is not None and self.finished >= self.max_jobs:
            return True
        if not self.until_empty or self._maybe_more or not self.keeper.swept_once:
            return False
        try:  # §16: pending jobs held back by a concurrency limit are runnable soon
            return not self._slots.waits(time.monotonic())  # once a poll interval at most
        except Exception as exc:  # the store is unwell: not done, the loop backs off
            self._db_failed(exc)
        return False

    def _wait(self, *deadlines: float | None) -> None:
        """Sleep until a deadline, an in-process event, or another connection's commit.

        A store that `pushes_changes` (PostgreSQL's listener) wakes the loop through
        `jobcore.wakeup`; other stores' commits are looked for in this inner loop (one
        `Storage.wait_for_change(0)` each) every `wake_check_interval`, or as the store's
        write watch says (SQLite: not at all while nobody writes; `sqlite_writewatch`).
        """
        self._gather()
        mono = time.monotonic()
        free = self._free_slots(self._stopping)
        # Database steps (a poll, a due retry, start markers): only when the loop can act
        # on them. A deadline already past that the loop could not act on (no free slot
        # to claim into, a database backing off, a shutdown deadline already handled)
        # would make every wait return at once: a loop spinning on a core.
        steps = [d for d in deadlines if d is not None] if free > 0 else []
        if self._to_mark:  # executors wait for these markers: commit now
            steps.append(mono)
        if self._db_backoff:
            steps = [max(step, self._db_retry_at) for step in steps]
            steps.append(self._db_retry_at)
        until = min(steps + self._attempt_deadlines(), default=float("inf"))
        if self._stopping and self._stop_deadline is not None and self._stop_deadline > mono:
            until = min(until, self._stop_deadline)
        if free > 0 and self._maybe_more and not self._db_backoff:
            return  # the last claim was full: there is probably more to claim right away
        watch = (
            (free > 0 or len(self.inflight) > 0)
            and not self._db_backoff
            and not powers.pushes_changes(self.queue.storage)
        )
        cond, writes = self._cond, self._writes
        while True:
            with cond:
                if self.inflight.has_news() or self.keeper.news or self._woken:
                    return
                if self.inflight.has_began():  # an executor waits for its start marker
                    if not self._db_backoff:
                        return
                    until = min(until, self._db_retry_at)
                remaining = until - time.monotonic()
                if remaining <= 0:
                    return
                timeout = (
                    writes.look_in(remaining, self.wake_check_interval) if watch else remaining
                )
                if cond.wait(None if math.isinf(timeout) else timeout):
                    return  # notified: an outcome, a wake-up, a lease report or a stop request
            if watch:
                try:
                    if self.queue.storage.wait_for_change(0):
                        self._external_change = True
                        return
                except Exception as exc:  # the loop backs off; the wait must not die
                    self._db_failed(exc)
                    return

    def _gather(self) -> None:
        """Let short handlers that the last commit released report first (up to `GATHER`).

        Only where starts are marked in the database (no start slots): there a handler
        begins only once its start marker committed, so each executor runs one
        job per commit; its report and its next job's marker ride in the next commit. If
        that commit began while they were still running, it would carry one executor's
        work and the next one the rest: twice the commits for the same jobs.
        """
        recent = self._recent_ms
        if recent is None or recent >= GATHER * 1000 or self._db_backoff:
            return
        if self.inflight.self_noting:  # executors wait for no commit (start slots)
            return
        since = self._committed_at
        until = since + GATHER
        cond = self._cond
        with cond:
            while self.inflight.released_since(since):
                if self._woken or self.keeper.news:
                    return
                remaining = until - time.monotonic()
                if remaining <= 0:
                    return
                cond.wait(remaining)

    def _attempt_deadlines(self) -> list[float]:
        times: list[float] = []
        for attempt in self.inflight:
            if attempt.phase is Phase.CLAIMED:
                times.append(attempt.claimed_at + self.prefetch_wait)
            elif attempt.phase is Phase.STARTED and attempt.deadline is not None:
                times.append(attempt.deadline)
            elif attempt.phase is Phase.STOPPING and attempt.stop_until is not None:
                times.append(attempt.stop_until)
        return times

    def _sleep(self, seconds: float) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._stopping, timeout=seconds)

    # -- database steps ------------------------------------------------------------

    def _commit(self, claim_limit: int, *, promote: bool, look_ahead: bool = False) -> int | None:
        """Record outcomes and claim up to `claim_limit` jobs in one transaction: how many
        were claimed; None if the store refused it (recorded apart, no claim ran)."""
        batch = list(self._unrecorded)
        # Starts are marked once an executor took the job (never by the claim itself, so
        # a worker dying before its executors take the jobs charges them nothing), and
        # the handler begins only once its marker committed (`InFlight.start`).
        marks = [attempt for attempt in self._to_mark if attempt.phase is Phase.STARTING]
        committed = self.group_commit.commit(
            batch,
            claim_limit=min(claim_limit, self.claim_batch),
            promote=promote,
            started=[attempt.lease for attempt in marks],
            start=0,
            recorded_apart=self._recorded_apart,
            look_ahead=look_ahead,
        )
        if committed is None:  # refused: recorded apart, nothing claimed
            return None
        recorded, claimed = committed
        self._committed_at = time.monotonic()
        self._unrecorded = []
        self._to_mark = []
        if marks:
            seen = getattr(self.queue.storage, "marked_seen", None)
            lost = self.inflight.marked(marks, seen() if seen is not None else None)
            for attempt in lost:  # its lease ended before its start could be marked
                self.supervisor.lease_lost(attempt, time.monotonic())
        for attempt, answer in zip(batch, recorded, strict=True):
            self._after_record(attempt, answer)
        self._start_claimed(claimed)
        return len(claimed)

    def _replace_executor(self, attempt: Attempt) -> None:
        """A handler was left behind: a fresh executor takes its slot (unless stopping)."""
        if not abandoned(self.executors, attempt) and not self._stopping:  # async: cancelled again
            self.executors.spawn()

    def _recorded_apart(self, attempt: Attempt, answer: Recorded) -> None:
        self._unrecorded.remove(attempt)
        self._after_record(attempt, answer)

    def _finish(self, attempt: Attempt) -> None:
        """The attempt leaves the table; count it unless it never ran and was given back."""
        self.inflight.remove(attempt)
        if attempt.ran or not (attempt.outcome is None or isinstance(attempt.outcome, Released)):
            self.finished += 1
        else:
            self._claimed_total -= 1  # a claim that did not run: it may be claimed again

    def _after_record(self, attempt: Attempt, answer: Recorded) -> None:
        self._finish(attempt)
        if attempt.ran and not attempt.replaced and attempt.ctx.stop_reason is None:
            recent = self._recent_ms
            self._recent_ms = (
                attempt.duration_ms if recent is None else 0.9 * recent + 0.1 * attempt.duration_ms
            )
        job = answer.job
        if job is None:
            stale = "stale report for job %s (lease %s) ignored: its lease was lost"
            log.warning(stale, attempt.job.id, attempt.lease.lease_id)
            return
        for child in answer.children:
            if child.created:
                self._children_added = True
                self._announce("jobcore_job_enqueued", job=child.job)
        if job.status is JobStatus.CANCELLED:  # a cancel request wins over release and retry
            self.stats["cancelled"] += 1
            self._announce("jobcore_job_cancelled", job=job)
            return
        match answer.outcome:
            case Completed():
                self.stats["completed"] += 1
                self._announce("jobcore_job_completed", job=job, duration_ms=attempt.duration_ms)
            case Retrying(error=error):
                self.stats["retrying"] += 1
                due = time.monotonic() + max(0, job.run_at - self.queue.storage.now()) / 1000
                self.promotion.retry_due(due)
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

    def _start_claimed(self, claimed: list[Job]) -> None:
        """Hand claimed jobs to the executors; each is marked started once one takes it."""
        mono = time.monotonic()
        for job in claimed:
            self._claimed_total += 1
            lease = Lease.of(job)
            attempt = Attempt(
                job=job,
                lease=lease,
                ctx=self._context(job),
                claimed_at=mono,
            )
            self.inflight.add(attempt)
            self._announce("jobcore_job_claimed", job=job, worker=self.worker_id)
            self.executors.submit(attempt)

    def _context(self, job: Job) -> JobContext:
        try:
            job_type = self.queue.job_type(job.type)
        except Exception:  # cannot happen for claimed types; the attempt then fails alone
            job_type = JobType(name=job.type, payload_model=Payload, handler=_unstartable)
        return JobContext(
            job=job,
            job_type=job_type,
            payload=None,
            worker=self.worker_id,
            config=self.queue.config,
            build_child=self.queue.build,
            request_heartbeat=self.keeper.request_heartbeat,
        )

    # -- notifications (run by the notifier thread, see `jobcore.notifier`) ---------

    def _announce(self, hook_name: str, **kwargs: Any) -> None:
        self.notifier.announce(hook_name, **kwargs)

    def _flush_notices(self) -> None:
        self.notifier.flush()


__all__ = ["Worker"]
