"""The storage interface every backend implements; SQL dialect stays inside backends.

State-machine rules (what may follow what, retry arithmetic) live in the
core; a backend only executes guarded single-statement transitions and
reports which ones took effect.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from jobcore.models import Job, Lease, NewJob, Outcome


@dataclass(frozen=True, slots=True)
class Inserted:
    """An enqueue's answer: the job row, and whether this call created it."""

    job: Job
    created: bool


@dataclass(frozen=True, slots=True)
class Recorded:
    """The answer to one outcome: the updated job, or None when the report was stale."""

    outcome: Outcome
    job: Job | None
    children: tuple[Inserted, ...] = ()


@dataclass(frozen=True, slots=True)
class Swept:
    """A job whose lease expired, and what the sweep made of it."""

    job: Job
    action: str  # "reclaimed" | "failed" | "cancelled"


@dataclass(slots=True)
class Stats:
    counts: dict[str, int] = field(default_factory=dict)
    by_type: dict[str, dict[str, int]] = field(default_factory=dict)
    failures: list[dict[str, Any]] = field(default_factory=list)
    stuck: list[Job] = field(default_factory=list)
    durations: dict[str, dict[str, float | int | None]] = field(default_factory=dict)
    last_hour: dict[str, int] = field(default_factory=dict)
    duplicates: list[dict[str, Any]] = field(default_factory=list)


@runtime_checkable
class Storage(Protocol):
    """A job store. Every method is safe to call from any thread."""

    def migrate(self) -> None:
        """Create or upgrade the schema; a newer schema than this code knows is an error."""

    def close(self) -> None: ...

    def transaction(self) -> AbstractContextManager[Any]:
        """A write transaction on this thread's connection (outbox): yields the connection.

        Jobs inserted inside it commit or roll back with the application's writes.
        """

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Run `callback` once the current transaction commits (now, if none is open)."""

    def insert(self, jobs: Sequence[NewJob], now: int) -> list[Inserted]:
        """Insert jobs in one transaction, deduplicating unfinished idempotency keys."""

    def claim(
        self,
        *,
        worker: str,
        limit: int,
        now: int,
        lease_ms: int,
        queues: Sequence[str] = (),
        types: Sequence[str] = (),
    ) -> list[Job]:
        """Promote due scheduled jobs, then claim up to `limit` pending ones atomically."""

    def commit_batch(
        self,
        outcomes: Sequence[Outcome],
        *,
        worker: str,
        claim_limit: int,
        now: int,
        lease_ms: int,
        queues: Sequence[str] = (),
        types: Sequence[str] = (),
        promote: bool = True,
    ) -> tuple[list[Recorded], list[Job]]:
        """Group commit: record `outcomes`, then claim up to `claim_limit`, in one transaction.

        `promote=False` skips promoting due scheduled jobs (the caller knows none are due).
        """

    def next_due(self) -> int | None:
        """The earliest `run_at` among scheduled jobs, or None."""

    def extend_leases(self, leases: Sequence[Lease], *, now: int, lease_ms: int) -> dict[str, bool]:
        """Extend the leases still owned; returns `{job_id: cancel_requested}` for those."""

    def cancel_requested(self, worker: str) -> set[str]:
        """Ids of jobs claimed by `worker` whose cancellation was requested."""

    def record(self, outcomes: Sequence[Outcome], *, now: int) -> list[Recorded]:
        """Apply owner transitions fenced by lease, in one transaction."""

    def sweep(self, *, now: int) -> list[Swept]:
        """Reclaim, fail or cancel claimed jobs whose lease expired before `now`."""

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

    def retry(self, job_ids: Sequence[str], *, now: int) -> list[Job | None]:
        """failed/cancelled -> pending with attempts reset; None where the job was not eligible."""

    def cancel(self, job_ids: Sequence[str], *, now: int) -> list[Job | None]:
        """scheduled/pending -> cancelled; claimed -> cancel requested; None if not eligible."""

    def prune(self, *, before: int, statuses: Sequence[str] = (), types: Sequence[str] = ()) -> int:
        """Delete finished jobs (of these statuses and types) finished before `before`."""

    def scan(
        self, *, statuses: Sequence[str] = (), types: Sequence[str] = (), batch: int = 500
    ) -> Iterator[Job]:
        """Every matching job, oldest first, read in batches."""

    def count_by_status(self) -> dict[str, int]:
        """How many jobs are in each status (absent statuses are left out)."""

    def stats(self, *, now: int) -> Stats: ...

    def changed(self) -> bool:
        """True if another connection committed since the last call on this thread."""
