"""The hub's single writer: group commit of many requests' writes, and batched claims.

Request handlers hand their writes (enqueues, outcomes, lease extensions) and
claims to one thread. Each round it commits everything that accumulated
while the previous round ran in ONE transaction, so the fsync cost is paid
per round, not per request (SQLite has no group commit of its own). A round
never waits to fill up: an idle hub commits a lone result at once.

Claims that find nothing wait (long-poll) until the store changes; the
change waiter bumps `generation`, and only claims not yet tried at the new
generation run again. The clock is a change too: while claims wait, the engine
knows when the earliest scheduled job is due (`Storage.next_due`) and tries
them again then (a claim promotes due jobs), so a delayed or retried job
reaches a waiting claim when it becomes due, not when the wait ends. When an unfiltered claim finds nothing, the other
waiting claims are not tried that round (nothing is claimable), so a change
costs one claim query, not one per waiting client.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

from jobcore import wakeup
from jobcore.errors import JobNotFound, StorageError
from jobcore.models import (
    Cancelled,
    Completed,
    Failed,
    Job,
    JobStatus,
    Lease,
    NewJob,
    Outcome,
    Released,
)
from jobcore.plugins import notify
from jobcore.queue import Queue
from jobcore.storage.base import Inserted, Recorded
from jobcore_http.errors import ApiError

log = logging.getLogger("jobcore.http.engine")

T = TypeVar("T")
W = TypeVar("W")


WRITE_TIMEOUT = 60.0  # seconds a request waits for the writer before answering 503
DUE_AGAIN = 0.05  # seconds: look again when a job due already stayed scheduled (locked)


class HubStopping(StorageError):
    """The hub is shutting down and takes no more writes (503: retry against the next hub)."""


async def settle(future: Future[T]) -> T:
    """Await the writer's answer; a writer that does not answer in time is a 503, not a hang."""
    try:
        return await asyncio.wait_for(asyncio.wrap_future(future), WRITE_TIMEOUT)
    except TimeoutError:
        raise StorageError(
            f"the hub's writer did not answer within {WRITE_TIMEOUT:g}s; retry later"
        ) from None


async def settle_all(futures: Sequence[Future[T]]) -> list[T]:
    """Await writes handed in together (`Engine.together`: one round resolves them, in
    order): one wait for the last, not an event-loop wake-up per write."""
    if futures:
        await settle(futures[-1])
    return [future.result() if future.done() else await settle(future) for future in futures]


@dataclass
class ClaimRequest:
    worker: str
    limit: int
    queues: tuple[str, ...]
    types: tuple[str, ...]
    deadline: float  # time.monotonic()
    start: int | None = None  # how many of its jobs are marked started (None: all)
    future: Future[list[Job]] = field(default_factory=Future)
    tried_at: int = -1  # the generation it last found nothing at

    @property
    def key(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return (self.queues, self.types)


@dataclass
class _Write:
    kind: str  # "insert" | "outcome" | "finish" | "extend" | "start"
    value: Any
    future: Future[Any] = field(default_factory=Future)


class Engine:
    """One thread committing the hub's writes and claims in rounds."""

    def __init__(self, queue: Queue, *, lease_ms: int) -> None:
        self.queue = queue
        self.storage = queue.storage
        self.lease_ms = lease_ms
        self._lock = threading.Lock()
        self._writes: list[_Write] = []
        self._claims: list[ClaimRequest] = []
        self._kick = threading.Event()
        self._generation = 0
        self._due_at: float | None = None  # monotonic: the earliest scheduled job is due
        self._stopping = False
        self._no_wait = False
        self._closed = False  # the thread takes no more writes
        self._thread = threading.Thread(target=self._run, name="hub-engine", daemon=True)
        self.rounds = 0
        self.claim_ended: list[Callable[[str], None]] = []  # called with each ended claim's job id

    # -- API for request handlers (any thread) ------------------------------------

    def start(self) -> None:
        self._thread.start()

    def _submit(self, kind: str, value: Any) -> Future[Any]:
        write = _Write(kind, value)
        with self._lock:
            if self._closed or not self._thread.is_alive():
                raise HubStopping("the hub is shutting down; retry in a moment")
            self._writes.append(write)
        self._kick.set()
        return write.future

    def together(
        self, outcomes: Sequence[Outcome], leases: Sequence[Lease], starts: Sequence[Lease] = ()
    ) -> tuple[list[Future[Recorded]], list[Future[bool | None]], list[Future[str | None]]]:
        """Hand in many outcomes, lease extensions and starts at once: they land in the same
        round (one transaction), as one agent's batched report asks."""
        mine = [_Write("outcome", outcome) for outcome in outcomes]
        beats = [_Write("extend", lease) for lease in leases]
        begun = [_Write("start", lease) for lease in starts]
        with self._lock:
            if self._closed or not self._thread.is_alive():
                raise HubStopping("the hub is shutting down; retry in a moment")
            self._writes.extend(mine)
            self._writes.extend(beats)
            self._writes.extend(begun)
        self._kick.set()
        return [w.future for w in mine], [w.future for w in beats], [w.future for w in begun]

    def insert(self, jobs: Sequence[NewJob]) -> Future[list[Inserted]]:
        return self._submit("insert", list(jobs))

    def record(self, outcome: Outcome) -> Future[Recorded]:
        return self._submit("outcome", outcome)

    def finish(self, job_id: str, outcome_of: Callable[[Job], Outcome]) -> Future[Recorded]:
        """Read the job and record the outcome `outcome_of` makes of it, in one round (no
        read of its own before the write). `outcome_of` raises `ApiError` to refuse (that
        request's answer alone); a job not found answers `JobNotFound`."""
        return self._submit("finish", (job_id, outcome_of))

    def extend(self, lease: Lease) -> Future[bool | None]:
        """Extend a lease; the future says `cancel_requested`, or None if the lease is lost."""
        return self._submit("extend", lease)

    def claim(
        self,
        worker: str,
        limit: int,
        queues: Sequence[str],
        types: Sequence[str],
        wait: float,
        start: int | None = None,
    ) -> ClaimRequest:
        """Claim up to `limit` jobs within `wait` seconds; the first `start` of them (None:
        all) are marked started in the claim's transaction, the others are read-ahead."""
        if self._no_wait:
            wait = 0.0
        request = ClaimRequest(
            worker, limit, tuple(queues), tuple(types), time.monotonic() + max(0.0, wait), start
        )
        with self._lock:
            if self._stopping:
                request.future.set_result([])
                return request
            self._claims.append(request)
        self._kick.set()
        return request

    def withdraw(self, request: ClaimRequest) -> None:
        """The client went away: stop waiting for it; jobs claimed for it meanwhile go back."""
        with self._lock:
            if request in self._claims:
                self._claims.remove(request)
        if request.future.cancel():
            return
        jobs = request.future.result()
        for job in jobs:
            self.record(Released(Lease.of(job)))

    def no_more_waiting(self) -> None:
        """Shutdown: waiting claims answer now (nothing), new ones do not wait."""
        with self._lock:
            self._no_wait = True
            now = time.monotonic()
            for request in self._claims:
                request.deadline = min(request.deadline, now)
        self._kick.set()

    def changed(self) -> None:
        """The store changed (called by the change waiter)."""
        with self._lock:
            self._generation += 1
        self._kick.set()

    def stop(self, timeout: float = 30.0) -> None:
        """Answer waiting claims (nothing), commit what was handed in, end the thread."""
        with self._lock:
            self._stopping = True
        self._kick.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    # -- the thread ----------------------------------------------------------------

    def _run(self) -> None:
        while True:
            self._kick.wait(self._next_timeout())
            self._kick.clear()
            now = time.monotonic()
            with self._lock:
                if self._due_at is not None and now >= self._due_at:
                    self._due_at = None  # a scheduled job is due: waiting claims try again
                    self._generation += 1
                writes, self._writes = self._writes, []
                generation = self._generation
                stopping = self._stopping
                due: list[ClaimRequest] = []
                keep: list[ClaimRequest] = []
                for request in self._claims:
                    if request.future.cancelled():
                        continue
                    if stopping:
                        request.future.set_result([])
                    elif request.tried_at < generation:
                        due.append(request)
                        keep.append(request)
                    elif request.deadline <= now:
                        request.future.set_result([])
                    else:
                        keep.append(request)
                self._claims = keep
            if writes or due:
                try:
                    self._round(writes, due, generation)
                except Exception:  # never let the writer die
                    log.exception("hub engine round failed")
                    for write in writes:
                        if not write.future.done():
                            write.future.set_exception(RuntimeError("internal error"))
                self.rounds += 1
            if stopping:
                with self._lock:
                    if not self._writes:
                        self._closed = True
                        return

    def _next_timeout(self) -> float:
        with self._lock:
            if not self._claims:
                return 1.0
            soonest = min(request.deadline for request in self._claims)
            if self._due_at is not None:
                soonest = min(soonest, self._due_at)
        return max(0.0, min(1.0, soonest - time.monotonic()))

    def _watch_due(self) -> None:
        """While claims wait, note when the earliest scheduled job is due (after every round
        that left claims waiting: every change that could move it ran one)."""
        with self._lock:
            waiting = bool(self._claims)
        due_at: float | None = None
        if waiting:
            try:
                due = self.storage.next_due()
                if due is not None:
                    left = (due - self.storage.now()) / 1000
                    due_at = time.monotonic() + (left if left > 0 else DUE_AGAIN)
            except Exception as exc:  # the store is unwell: the next change retries
                log.warning("reading the next due job failed: %s", exc)
        with self._lock:
            self._due_at = due_at

    def _round(self, writes: list[_Write], due: list[ClaimRequest], generation: int) -> None:
        try:
            with self.storage.transaction():
                results = self._apply(writes)
                claimed = self._claims_in(due)
        except Exception:
            results, claimed = self._isolated(writes, due)
        for write, result in zip(writes, results, strict=True):
            if isinstance(result, BaseException):
                write.future.set_exception(result)
            else:
                write.future.set_result(result)
        self._answer_claims(due, claimed, generation)
        if due:
            self._watch_due()
        self._after(writes, results, claimed)

    def _isolated(
        self, writes: list[_Write], due: list[ClaimRequest]
    ) -> tuple[list[Any], dict[int, list[Job]]]:
        """A round failed: redo each part in its own transaction so one bad write fails alone."""
        results: list[Any] = []
        for write in writes:
            try:
                with self.storage.transaction():
                    results.extend(self._apply([write]))
            except Exception as exc:
                results.append(exc)
        claimed: dict[int, list[Job]] = {}
        for request in due:
            try:
                with self.storage.transaction():
                    claimed.update(self._claims_in([request]))
            except Exception:
                log.exception("claim for %s failed", request.worker)
        return results, claimed

    def _apply(self, writes: list[_Write]) -> list[Any]:
        results: list[Any] = [None] * len(writes)
        outcomes: list[tuple[int, Outcome]] = []
        leases = [(i, w) for i, w in enumerate(writes) if w.kind == "extend"]
        starts = [(i, w) for i, w in enumerate(writes) if w.kind == "start"]
        for i, write in enumerate(writes):
            if write.kind == "insert":
                results[i] = self.storage.insert(write.value)
            elif write.kind == "outcome":
                outcomes.append((i, write.value))
            elif write.kind == "finish":
                job_id, outcome_of = write.value
                try:
                    outcomes.append((i, outcome_of(self.queue.get(job_id))))
                except (ApiError, JobNotFound) as exc:  # refused: this request's answer alone
                    results[i] = exc
        # Each store call names a job once, so two reports of one job in a round apply in
        # the order they came on every store: PostgreSQL applies one call's outcomes grouped
        # by kind (a later completion before an earlier failure), and every store answers
        # extensions by job id (a stale lease beside the live one read the live one's answer).
        for wave in _one_per_job(outcomes, lambda outcome: outcome.lease.job_id):
            recorded = self.storage.record([outcome for _, outcome in wave])
            for (i, _), item in zip(wave, recorded, strict=True):
                results[i] = item
        for beats in _one_per_job(leases, lambda write: write.value.job_id):
            owned = self.storage.extend_leases([w.value for _, w in beats], lease_ms=self.lease_ms)
            for i, beat in beats:
                results[i] = owned.get(beat.value.job_id)
        for marks in _one_per_job(starts, lambda write: write.value.job_id):
            begun = self._start([w.value for _, w in marks])
            for i, mark in marks:
                results[i] = begun.get(mark.value.job_id)
        return results

    def _start(self, leases: list[Lease]) -> dict[str, str]:
        """Mark read-ahead jobs started: `{job_id: "started"}`, or `"cancelled"` for a job
        whose cancel was requested (it never starts, DESIGN §4); a lease not held is absent.
        The lease is extended too: the handler begins with a whole lease."""
        held = self.storage.extend_leases(leases, lease_ms=self.lease_ms)
        go = [lease for lease in leases if held.get(lease.job_id) is False]
        marked = self.storage.mark_started(go) if go else set()
        answers = {job_id: "cancelled" for job_id, cancel in held.items() if cancel}
        answers.update(dict.fromkeys(marked, "started"))
        return answers

    def _claims_in(self, due: list[ClaimRequest]) -> dict[int, list[Job]]:
        claimed: dict[int, list[Job]] = {}
        empty: set[tuple[tuple[str, ...], tuple[str, ...]]] = set()
        for request in due:
            if request.future.cancelled() or request.key in empty:
                continue
            jobs = self.storage.claim(
                worker=request.worker,
                limit=request.limit,
                lease_ms=self.lease_ms,
                queues=request.queues,
                types=request.types,
                start=request.start,
            )
            if jobs:
                claimed[id(request)] = jobs
            if len(jobs) < request.limit:
                empty.add(request.key)
                if request.key == ((), ()):
                    break  # nothing is claimable at all
        return claimed

    def _answer_claims(
        self, due: list[ClaimRequest], claimed: dict[int, list[Job]], generation: int
    ) -> None:
        now = time.monotonic()
        orphans: list[Job] = []
        with self._lock:
            for request in due:
                jobs = claimed.get(id(request), [])
                if jobs or request.deadline <= now or request.future.cancelled():
                    if request in self._claims:
                        self._claims.remove(request)
                    if request.future.cancelled() or not _resolve(request.future, jobs):
                        orphans.extend(jobs)
                else:
                    request.tried_at = generation
        if orphans:  # the client left while we claimed for it: give the jobs back
            self._release(orphans)

    def _release(self, jobs: list[Job]) -> None:
        try:
            self.storage.record([Released(Lease.of(job)) for job in jobs])
            wakeup.notify(self.queue.wake_key)
        except Exception:
            log.exception("releasing %d jobs of a departed client failed", len(jobs))

    def _after(
        self, writes: list[_Write], results: list[Any], claimed: dict[int, list[Job]]
    ) -> None:
        """Plugins' notification hooks and in-process wake-ups, after the commit."""
        pm = self.queue.pm
        wake = False
        for write, result in zip(writes, results, strict=True):
            if isinstance(result, BaseException) or result is None:
                continue
            if write.kind == "insert":
                wake = True
                for item in result:
                    if item.created:
                        notify(pm, "jobcore_job_enqueued", job=item.job)
            elif write.kind in ("outcome", "finish") and result.state == "recorded":
                outcome = write.value if write.kind == "outcome" else result.outcome
                wake = _announce(pm, outcome, result.job) or wake
                self._claim_ended(outcome.lease.job_id)
        for jobs in claimed.values():
            for job in jobs:
                notify(pm, "jobcore_job_claimed", job=job, worker=job.locked_by or "")
        if wake:
            wakeup.notify(self.queue.wake_key)

    def _claim_ended(self, job_id: str) -> None:
        for callback in self.claim_ended:
            try:
                callback(job_id)
            except Exception:
                log.exception("claim-ended callback failed for job %s", job_id)


def _one_per_job(
    items: list[tuple[int, W]], job_of: Callable[[W], str]
) -> list[list[tuple[int, W]]]:
    """`items` split into store calls that name each job at most once, in order."""
    waves: list[list[tuple[int, W]]] = []
    seen: dict[str, int] = {}  # job id -> how many waves name it already
    for item in items:
        job_id = job_of(item[1])
        wave = seen.get(job_id, 0)
        seen[job_id] = wave + 1
        if wave == len(waves):
            waves.append([])
        waves[wave].append(item)
    return waves


def _resolve(future: Future[list[Job]], jobs: list[Job]) -> bool:
    try:
        future.set_result(jobs)
    except Exception:  # cancelled meanwhile
        return False
    return True


def _announce(pm: Any, outcome: Outcome, job: Job | None) -> bool:
    """Fire the hook for a recorded outcome; True if the job became claimable again."""
    if job is None:
        return False
    call: Callable[..., None] = lambda name, **kw: notify(pm, name, job=job, **kw)  # noqa: E731
    if isinstance(outcome, Completed):
        duration = (job.completed_at or 0) - (job.claimed_at or job.completed_at or 0)
        call("jobcore_job_completed", duration_ms=float(duration))
    elif isinstance(outcome, Failed):
        call("jobcore_job_failed", error=outcome.error)
    elif isinstance(outcome, Cancelled):
        call("jobcore_job_cancelled")
    elif job.status in (JobStatus.PENDING, JobStatus.SCHEDULED) and job.last_error:
        call("jobcore_job_retrying", error=job.last_error)
    return job.status is JobStatus.PENDING
