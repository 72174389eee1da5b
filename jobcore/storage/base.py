"""The storage interface every backend implements; SQL dialect stays inside backends.

The state machine lives in `jobcore.transitions`; a backend executes the
guarded statements it derives from that table and reports which took effect.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, fields
from typing import Any, Literal, NamedTuple, Protocol, runtime_checkable

from jobcore.concurrency import Limit
from jobcore.models import Event, Job, Lease, NewJob, Outcome
from jobcore.pauses import Pause
from jobcore.rates import Rate, RateUse


@dataclass(frozen=True, slots=True)
class Inserted:
    """An enqueue's answer: the job row, and whether this call created it."""

    job: Job
    created: bool


RecordState = Literal["recorded", "already", "stale"]


@dataclass(frozen=True, slots=True)
class Recorded:
    """The answer to one outcome.

    `state` is `recorded` (this call applied it; `job` is the row after it),
    `already` (the same outcome of the same `lease_id` was recorded before;
    `job` is the row as stored now) or `stale` (the lease is not current and
    never ended this way; `job` is None, nothing changed).
    """

    outcome: Outcome
    job: Job | None
    state: RecordState = "recorded"
    children: tuple[Inserted, ...] = ()


@dataclass(frozen=True, slots=True)
class Swept:
    """A job whose lease expired, and what the sweep made of it.

    `action`: `reclaimed` (back to pending, attempt kept, error entry),
    `released` (never started: back to pending, attempt given back),
    `failed` (attempts exhausted) or `cancelled` (cancel was requested).
    """

    job: Job
    action: str


class Claim(NamedTuple):
    """A claim as one look at the store saw it (`sweep(only=...)` acts on it only if still so)."""

    job_id: str
    lease_id: str
    lease_expires_at: int


@dataclass(slots=True)
class Stats:
    counts: dict[str, int] = field(default_factory=dict)
    by_type: dict[str, dict[str, int]] = field(default_factory=dict)
    failures: list[dict[str, Any]] = field(default_factory=list)
    stuck: list[Job] = field(default_factory=list)
    durations: dict[str, dict[str, float | int | None]] = field(default_factory=dict)
    last_hour: dict[str, int] = field(default_factory=dict)
    duplicates: list[dict[str, Any]] = field(default_factory=list)
    paused: list[Pause] = field(default_factory=list)  # filled by `Queue.stats` (DESIGN §16)
    limits: list[dict[str, Any]] = field(default_factory=list)  # `operating.limit_rows`
    sections: list[StatsSection] = field(default_factory=list)  # plugins' (`jobcore_stats`)


@dataclass(frozen=True)
class StatsSection:
    """A plugin's part of `jobcore stats` (hook `jobcore_stats`): `data` under `key` in
    `stats --json` and `GET /api/stats` (JSON values only), `text` in plain `stats`
    (a titled block of lines, no trailing newline)."""

    key: str
    data: Any
    text: str


# the core's keys of `stats --json`, which no plugin's section may take
STATS_KEYS = frozenset(f.name for f in fields(Stats) if f.name != "sections")


@runtime_checkable
class Storage(Protocol):
    """A job store. Every method is safe to call from any thread.

    Time comes from the store (`now()`); no method takes the caller's clock.
    Every error a backend raises is a `jobcore.errors.StorageError` subclass
    (or `IllegalTransition` for an operator asking for an impossible change).
    Every job transition appends one `Event` in the same transaction
    (promotion of due scheduled jobs excepted).
    """

    def now(self) -> int:
        """The store's clock: integer ms UTC (SQLite: this machine; PostgreSQL: the server)."""

    def migrate(self) -> None:
        """Create or upgrade the schema; takes the write lock only when there is work.

        A schema newer than this code knows raises `SchemaTooNew`.
        """

    def close(self) -> None: ...

    def transaction(self) -> AbstractContextManager[Any]:
        """A write transaction on this thread's connection (outbox): yields the connection.

        Jobs inserted inside it commit or roll back with the application's writes.
        """

    def after_commit(self, callback: Callable[[], None], *, conn: Any = None) -> None:
        """Run `callback` once the current transaction commits (now, if none is open).

        With `conn` (an application connection given to `insert`): once that
        connection's transaction commits, where the backend can tell; else now.
        """

    def insert(self, jobs: Sequence[NewJob], *, conn: Any = None) -> list[Inserted]:
        """Insert jobs in one transaction, deduplicating unfinished idempotency keys.

        With `conn` (the application's own driver connection to the same store,
        inside a transaction it opened) the rows are written on that connection
        and commit or roll back with it; `after_commit` callbacks then run when
        that connection commits, where the backend can tell.
        """

    def claim(
        self,
        *,
        worker: str,
        limit: int,
        lease_ms: int,
        queues: Sequence[str] = (),
        types: Sequence[str] = (),
        start: int | None = None,
    ) -> list[Job]:
        """Promote due scheduled jobs (bounded), then claim up to `limit` pending ones atomically.

        Each claimed job gets a new random `lease_id`. The first `start` of them
        (default: all) are marked started at claim time; the rest are prefetched
        and marked later (`commit_batch(started=...)`, `mark_started`).
        Filtering by queue or type does not scan other queues' rows.
        """

    def commit_batch(
        self,
        outcomes: Sequence[Outcome],
        *,
        worker: str,
        claim_limit: int,
        lease_ms: int,
        queues: Sequence[str] = (),
        types: Sequence[str] = (),
        promote: bool = True,
        started: Sequence[Lease] = (),
        start: int | None = None,
    ) -> tuple[list[Recorded], list[Job]]:
        """Group commit, one transaction: mark `started`, record `outcomes`, then claim.

        `promote=False` skips promoting due scheduled jobs (the caller knows none are due).
        """

    def next_due(self) -> int | None:
        """The earliest `run_at` among scheduled jobs, or None."""

    def extend_leases(self, leases: Sequence[Lease], *, lease_ms: int) -> dict[str, bool]:
        """Extend the leases still held; returns `{job_id: cancel_requested}` for those."""

    def mark_started(self, leases: Sequence[Lease]) -> set[str]:
        """Record that these claimed jobs' handlers began; returns the ids whose lease still held."""

    def cancel_requested(self, worker: str) -> set[str]:
        """Ids of jobs claimed by `worker` whose cancellation was requested."""

    def record(self, outcomes: Sequence[Outcome]) -> list[Recorded]:
        """Apply owner transitions fenced by `lease_id`, in one transaction."""

    def sweep(
        self,
        *,
        force: bool = False,
        hold_ms: int | None = None,
        only: Sequence[Claim] | None = None,
    ) -> list[Swept]:
        """Reclaim, release, fail or cancel claimed jobs whose lease expired; prune old events.

        One sweeper per store at a time: the sweep takes the store-level lock
        `sweep` for `hold_ms` (a worker passes its sweep interval; default: the
        backend's) and returns [] while another holder has it, unless `force`
        (an operator's `jobcore sweep`). The same holder may sweep again at once.
        With `only`, just those of these claims whose lease is still expired and
        whose `lease_id` and `lease_expires_at` are still as given.
        """

    def acquire_lock(self, name: str, holder: str, ttl_ms: int) -> bool:
        """Take or renew the store-level lock `name` for `ttl_ms`; False if another holds it."""

    def release_lock(self, name: str, holder: str) -> None:
        """Give the lock `name` up, if `holder` holds it."""

    def get(self, job_id: str) -> Job | None: ...

    def list_jobs(
        self,
        *,
        statuses: Sequence[str] = (),
        types: Sequence[str] = (),
        queues: Sequence[str] = (),
        finished_after: int | None = None,
        limit: int = 100,
    ) -> list[Job]:
        """Jobs newest first; `finished_after` keeps those finished at or after that time."""

    def failed_ids(self, types: Sequence[str] = ()) -> list[str]: ...

    def retry(self, job_ids: Sequence[str]) -> list[Job | None]:
        """failed/cancelled -> pending with attempts reset; None where the job was not eligible."""

    def cancel(self, job_ids: Sequence[str]) -> list[Job | None]:
        """scheduled/pending -> cancelled; claimed -> cancel requested; None if not eligible."""

    def prune(self, *, before: int, statuses: Sequence[str] = (), types: Sequence[str] = ()) -> int:
        """Delete finished jobs (of these statuses and types) finished before `before`."""

    def scan(
        self, *, statuses: Sequence[str] = (), types: Sequence[str] = (), batch: int = 500
    ) -> Iterator[Job]:
        """Every matching job, oldest first, read in batches."""

    def count_by_status(self) -> dict[str, int]:
        """How many jobs are in each status (absent statuses are left out)."""

    def stats(self) -> Stats: ...

    def wait_for_change(self, timeout: float) -> bool:
        """Block up to `timeout` seconds; True as soon as another connection committed.

        "Since the last call on this thread" (or since this thread's first use);
        `timeout=0` checks once without waiting.
        """

    def events_after(self, seq: int, limit: int = 1000) -> list[Event]:
        """Events after the event `seq` in delivery order, at most `limit` (0: from the oldest).

        A reader keeps the seq of the last event it got and asks again; every event
        committed later comes after it. Delivery order is oldest first but need not
        be seq order: with one writer at a time (SQLite) it is, while on PostgreSQL
        an event whose transaction committed late can carry a smaller seq than one
        delivered before it, so compare cursors by identity, not size. A seq is
        never handed out twice, even after pruning; a cursor no longer stored
        reads on from the events with greater seqs.
        """

    def last_event_seq(self) -> int:
        """The newest event's `seq` in delivery order (0 when there is none)."""

    def add_event(
        self,
        kind: str,
        *,
        job_id: str | None = None,
        worker_id: str | None = None,
        data: dict[str, Any] | None = None,
    ) -> int:
        """Append an event (e.g. `worker:registered`) in its own transaction; returns its seq."""

    # -- pause and resume (DESIGN §16) ----------------------------------------------
    # Every claim (`claim`, `commit_batch`) reads the pauses inside its own statement
    # or transaction and skips paused queues' and types' pending jobs.

    def pause(self, kind: str, name: str, *, reason: str, by: str) -> tuple[Pause, bool]:
        """Pause a queue or a type (`kind`); (the pause as stored, whether this call made it).

        Pausing what is paused already changes nothing and returns the stored pause.
        """

    def resume(self, kind: str, name: str) -> Pause | None:
        """Lift a pause; the pause lifted, or None when it was not paused."""

    def pauses(self) -> list[Pause]:
        """Every pause, by kind then name."""

    def queue_depths(self) -> dict[str, dict[str, int]]:
        """Unfinished jobs per queue: queue -> status (`scheduled|pending|claimed`) -> n."""

    # -- concurrency limits (DESIGN §16) -----------------------------------------------
    # Every claim reads the limits inside its own transaction and claims only what fits
    # under them, counting the claimed rows (so every way out of `claimed` frees a slot).

    def set_limit(self, scope: str, name: str, concurrency: int) -> Limit:
        """Set a limit at run time (it wins over a declared one); the limit as stored."""

    def clear_limit(self, scope: str, name: str) -> Limit | None:
        """Remove a limit; the limit removed, or None when there was none."""

    def limits(self) -> list[Limit]:
        """Every limit, by scope then name."""

    def declare_limits(self, declared: Sequence[Limit], unlimited: Sequence[str]) -> None:
        """Store the limits job types declare (a set one stays), and drop the declared
        limits of the types in `unlimited` (they declare none any more)."""

    def held(self) -> dict[tuple[str, str], int]:
        """Claimed jobs per limited (scope, name); for a key limit, its keys at the limit."""

    # -- rate limits (DESIGN §16, `jobcore.rates`) --------------------------------------
    # Every claim that takes rate-limited jobs counts the starts in each limit's sliding
    # window and writes its own, in the same transaction (same lock) as the claim.

    def set_rate(self, scope: str, name: str, rate: int, period_ms: int) -> Rate:
        """Set a rate limit at run time (it wins over a declared one); as stored."""

    def clear_rate(self, scope: str, name: str) -> Rate | None:
        """Remove a rate limit; the one removed, or None when there was none."""

    def rates(self) -> list[Rate]:
        """Every rate limit, by scope then name."""

    def declare_rates(self, declared: Sequence[Rate], unrated: Sequence[str]) -> None:
        """Store the rate limits job types declare (a set one stays), and drop the declared
        ones of the types in `unrated`."""

    def rate_use(self) -> dict[tuple[str, str], RateUse]:
        """Per rate limit, its real starts in the current window (for a key limit, its keys
        at it) and until when a push holds it full (`jobcore.rates.RateUse`)."""

    def push_rate(self, job_id: str, seconds: float) -> bool:
        """Hold the narrowest rate limit job `job_id` falls under (its key's, else its
        type's, else its queue's) full for `seconds` from now; False when none applies."""

    def rate_opens(self, now: int) -> int | None:
        """When a full rate limit this process's last limited claim saw has room again
        (store clock), if after `now`; `next_due` includes it."""
