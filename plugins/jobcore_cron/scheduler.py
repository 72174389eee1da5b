"""The scheduler: a thread in each worker (and hub) process that enqueues due runs.

There is no leader. Every scheduler on a store does the same: when a schedule's
next time has come (by the store's clock), it opens a write transaction, reads
the schedule's high-water mark (PostgreSQL: `FOR UPDATE`), enqueues the runs its
policy keeps, records them under their `(schedule, scheduled_at)` key and moves
the mark with a compare-and-set, all in that one transaction. A second
scheduler arriving for the same time finds the mark moved and enqueues nothing;
had both read the same mark, the second's insert of the run key or its
compare-and-set fails and its transaction, jobs included, rolls back.

Missed runs: a run is *on time* when a scheduler sees it within the schedule's
`grace` of its scheduled time, else *missed* (nothing ran then). `skip` enqueues
on-time runs only; `latest` also enqueues the newest missed run when no run is
on time (one catch-up); `all` enqueues every missed run no older than
`catchup_window`, oldest first. A schedule seen for the first time starts from
now: its first run is its first time after that.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from jobcore import JobcoreError, Queue, UnknownJobType
from jobcore.errors import StorageError
from jobcore.timeutil import iso
from jobcore_cron.spec import Schedule
from jobcore_cron.store import CronStore, Lost, Run

log = logging.getLogger("jobcore.cron")

MAX_RUNS_PER_TICK = 1000  # `all` over a long outage: the rest on the next tick
MAX_SLEEP = 30.0  # seconds: look at the clock at least this often
MAX_BACKOFF = 30.0
CLOCK_STEP_MS = 5000  # a mark further ahead of the store's clock: the clock went back


def plan(schedule: Schedule, last_at: int, now: int) -> tuple[list[int], int | None]:
    """The scheduled times to enqueue now, and the new high-water mark (None: nothing
    was due, leave it)."""
    newest = _newest(schedule, last_at, now)
    if newest is None:
        return [], None
    grace, window = schedule.grace_ms, max(schedule.catchup_ms, schedule.grace_ms)
    if schedule.policy == "all":
        runs = _due(schedule, max(last_at, now - window), now)
    else:
        runs = _due(schedule, max(last_at, now - grace), now)  # the on-time ones
        if not runs and schedule.policy == "latest" and now - newest <= window:
            runs = [newest]
    capped = len(runs) == MAX_RUNS_PER_TICK
    return runs, (runs[-1] if capped else now)


def _due(schedule: Schedule, after: int, now: int, limit: int = MAX_RUNS_PER_TICK) -> list[int]:
    """The first `limit` scheduled times in (after, now]."""
    times = itertools.takewhile(lambda at: at <= now, schedule.timing.times_after(after))
    return list(itertools.islice(times, limit))


def _newest(schedule: Schedule, after: int, now: int) -> int | None:
    """The latest scheduled time in (after, now], without walking a long outage from its
    start: past a few, look back from now over a window that doubles until it holds one."""
    first = _due(schedule, after, now, MAX_RUNS_PER_TICK + 1)
    if len(first) <= MAX_RUNS_PER_TICK:
        return first[-1] if first else None
    span = 1000
    while True:
        tail = _due(schedule, max(after, now - span), now, MAX_RUNS_PER_TICK + 1)
        if tail:
            return tail[-1]
        span *= 2


@dataclass(frozen=True)
class _Pass:
    """What one committed pass over a schedule did."""

    following: int  # the schedule's next time after this pass
    last_at: int  # the mark it found
    mark: int | None = None  # the mark it left (None: nothing was due)
    runs: list[Run] = field(default_factory=list)
    now: int | None = None  # the store's clock in the pass, when nothing was due


class Scheduler:
    """Runs `schedules` on `queue` in a background thread until `stop()`."""

    def __init__(
        self, queue: Queue, schedules: Sequence[Schedule], *, owner: str = "scheduler"
    ) -> None:
        self.queue = queue
        self.schedules = list(schedules)
        self.owner = owner
        self.store = CronStore(queue.storage)
        self._next: dict[str, int] = {}  # schedule → its next time, as last seen
        self._lost: set[str] = set()  # schedules whose last pass lost its compare-and-set
        self._failures: dict[str, float] = {}  # schedule → its pause after a failed pass (s)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ready = False

    # -- one pass --------------------------------------------------------------------

    def prepare(self) -> None:
        """Create the tables if missing."""
        if not self._ready:
            with self.queue.transaction() as conn:
                self.store.create(conn)
            self._ready = True

    def tick(self) -> float:
        """Enqueue what is due; seconds until the next schedule's time (at most MAX_SLEEP)."""
        self.prepare()
        now = self.queue.storage.now()
        for schedule in self.schedules:
            if self._next.get(schedule.name, 0) <= now:
                self._run_or_pause(schedule, now)
        now = self.queue.storage.now()
        wait = min(self._next.values(), default=now + int(MAX_SLEEP * 1000)) - now
        return min(MAX_SLEEP, max(0.01, wait / 1000))

    def _run_or_pause(self, schedule: Schedule, now: int) -> None:
        """`run_due`; a pass that fails holds back only its own schedule, retried after a
        pause doubling from 1s to MAX_BACKOFF. The store's unavailability fails the whole
        tick instead (the thread's loop backs off)."""
        try:
            self.run_due(schedule)
        except StorageError:
            raise
        except Exception as exc:
            pause = min(MAX_BACKOFF, max(1.0, self._failures.get(schedule.name, 0.0) * 2))
            self._failures[schedule.name] = pause
            self._next[schedule.name] = now + int(pause * 1000)
            if isinstance(exc, JobcoreError):
                log.warning("schedule %s: %s; trying again in %gs", schedule.name, exc, pause)
            else:
                log.exception("schedule %s: pass failed; trying again in %gs", schedule.name, pause)
        else:
            self._failures.pop(schedule.name, None)

    def run_due(self, schedule: Schedule) -> list[Run]:
        """One compare-and-set transaction for `schedule`: the runs this scheduler enqueued."""
        try:
            pass_ = self._pass(schedule)
        except Lost:
            # the mark is read under the write lock (PostgreSQL: FOR UPDATE), so a second
            # loss in a row means runs are recorded above the mark: the store was edited
            if schedule.name not in self._lost:
                log.debug("schedule %s: another scheduler ran it first", schedule.name)
                self._lost.add(schedule.name)
                self._next[schedule.name] = 0  # read the moved mark on the next tick
                return []
            log.warning(
                "schedule %s: runs it would enqueue are already recorded above its mark "
                "(was cron_schedules edited by hand?); nothing enqueued, trying again in %gs",
                schedule.name,
                MAX_SLEEP,
            )
            self._next[schedule.name] = self.queue.storage.now() + int(MAX_SLEEP * 1000)
            return []
        self._lost.discard(schedule.name)
        # set only once committed: after a failure the schedule stays due and is tried again
        self._next[schedule.name] = pass_.following
        for run in pass_.runs:
            log.info(
                "schedule %s: enqueued job %s for %s",
                schedule.name,
                run.job_id,
                iso(run.scheduled_at),
            )
        if pass_.now is not None and pass_.last_at - pass_.now > CLOCK_STEP_MS:
            log.warning(
                "schedule %s: the store's clock is %ds behind the latest time already dealt "
                "with (it was stepped back); to enqueue no time twice, runs resume after %s",
                schedule.name,
                (pass_.last_at - pass_.now) // 1000,
                iso(pass_.last_at),
            )
        if pass_.mark is not None:
            missed = _count_missed(schedule, pass_.last_at, pass_.mark, len(pass_.runs))
            if missed:
                log.warning(
                    "schedule %s: %s run(s) missed while no scheduler ran were not enqueued "
                    "(policy %s)",
                    schedule.name,
                    missed,
                    schedule.policy,
                )
        return pass_.runs

    def _pass(self, schedule: Schedule) -> _Pass:
        with self.queue.transaction() as conn:
            now = self.queue.storage.now()
            state = self.store.state(conn, schedule.name, lock=True)
            if state is None:  # first seen: starts from now
                self.store.start(conn, schedule.name, now)
                return _Pass(following=_first_after(schedule, now), last_at=now)
            times, mark = plan(schedule, state.last_at, now)
            following = _first_after(schedule, max(state.last_at, now if mark is None else mark))
            if mark is None:
                return _Pass(following=following, last_at=state.last_at, now=now)
            jobs = [
                self.queue.build(
                    schedule.type,
                    schedule.payload,
                    queue=schedule.queue,
                    priority=schedule.priority,
                    meta={"cron": {"schedule": schedule.name, "scheduled_at": iso(at)}},
                )
                for at in times
            ]
            inserted = self.queue.insert(jobs) if jobs else []
            runs = [
                Run(schedule.name, at, item.job.id, now)
                for at, item in zip(times, inserted, strict=True)
            ]
            self.store.advance(conn, state, mark, runs)
            return _Pass(following=following, last_at=state.last_at, mark=mark, runs=runs)

    # -- the thread ------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._loop, name=f"jobcore-cron-{self.owner}", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        backoff = 0.0
        delay = 0.0
        while not self._stop.wait(delay):
            try:
                delay = self.tick()
                backoff = 0.0
            except JobcoreError as exc:
                backoff = min(MAX_BACKOFF, max(1.0, backoff * 2))
                log.warning("schedules: %s; trying again in %gs", exc, backoff)
                delay = backoff
            except Exception:
                backoff = min(MAX_BACKOFF, max(1.0, backoff * 2))
                log.exception("schedules: tick failed; trying again in %gs", backoff)
                delay = backoff


def _first_after(schedule: Schedule, at: int) -> int:
    return next(iter(schedule.timing.times_after(at)))


def _count_missed(schedule: Schedule, last_at: int, mark: int, enqueued: int) -> str:
    """How many scheduled times in (last_at, mark] were not enqueued ("" for none); counted
    up to a bound, past it "over N"."""
    count = 0
    for at in schedule.timing.times_after(last_at):
        if at > mark:
            break
        count += 1
        if count > MAX_RUNS_PER_TICK + enqueued:
            return f"over {MAX_RUNS_PER_TICK}"
    return str(count - enqueued) if count > enqueued else ""


def check(queue: Queue, schedules: Sequence[Schedule]) -> dict[str, str]:
    """What would stop a schedule from enqueueing on `queue` (unknown type, bad payload),
    by schedule name."""
    return {name: problem for name, (problem, _) in problems_of(queue, schedules).items()}


def problems_of(queue: Queue, schedules: Sequence[Schedule]) -> dict[str, tuple[str, bool]]:
    """`check`, each problem with whether it is only this process's: a job type it lacks
    (another worker or the hub may have it), not a payload the type rejects."""
    problems = {}
    for schedule in schedules:
        try:
            queue.build(
                schedule.type, schedule.payload, queue=schedule.queue, priority=schedule.priority
            )
        except JobcoreError as exc:
            problems[schedule.name] = (
                f"schedule {schedule.name!r} ({schedule.source}): {exc}",
                isinstance(exc, UnknownJobType),
            )
    return problems


__all__ = ["Scheduler", "check", "plan", "problems_of"]
