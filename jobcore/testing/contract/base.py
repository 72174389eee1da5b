"""Helpers, backend hooks and fixtures shared by the conformance suite's parts."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

import pytest

from jobcore.ids import new_id
from jobcore.models import (
    Job,
    Lease,
    NewJob,
)
from jobcore.storage.base import Storage

T0 = 1_800_000_000_000  # a fixed "now", ms
LEASE = 60_000
HOUR = 3_600_000


class FakeClock:
    """A store clock the test moves by hand (ms UTC)."""

    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now


class AppConnection(Protocol):
    """The application's own connection to the store (a backend hook of the suite)."""

    raw: Any  # what the application passes as `conn=` (SQLite: apsw.Connection)

    def begin(self) -> None:
        """Open a transaction that holds the store's write lock (SQLite: BEGIN IMMEDIATE)."""

    def execute(self, sql: str) -> None: ...

    def scalar(self, sql: str) -> Any: ...

    def commit(self) -> None: ...

    def rollback(self) -> None: ...


StorageFactory = Callable[..., Storage]


def new_job(type: str = "noop", **fields: Any) -> NewJob:
    values: dict[str, Any] = {
        "id": new_id(),
        "type": type,
        "queue": "default",
        "payload": {},
        "priority": 0,
        "max_attempts": 3,
        "run_at": T0,
        "timeout_ms": None,
        "idempotency_key": None,
    }
    values.update(fields)
    return NewJob(**values)


def lease_of(job: Job, worker: str | None = None) -> Lease:
    """The lease of a claimed job, without the claimed row (`worker` only labels it)."""
    assert job.lease_id is not None, f"job {job.id} was not claimed"
    return Lease(job.id, job.lease_id, worker or job.locked_by or "?")


class ContractBase:
    """Fixtures and helpers; subclasses provide the `storage_factory` fixture."""

    # -- fixtures and helpers -------------------------------------------------------

    @pytest.fixture
    def clock(self) -> FakeClock:
        return FakeClock()

    @pytest.fixture
    def storage(self, storage_factory: StorageFactory, clock: FakeClock) -> Storage:
        return storage_factory(clock)

    @pytest.fixture
    def app_connection(self) -> Iterator[AppConnection]:
        pytest.skip("this backend's suite provides no app_connection fixture")
        yield None  # pragma: no cover

    @pytest.fixture
    def busy_storage(self) -> Storage:
        pytest.skip("this backend's suite provides no busy_storage fixture")

    def claim(self, storage: Storage, limit: int = 10, worker: str = "w1", **kw: Any) -> list[Job]:
        return storage.claim(worker=worker, limit=limit, lease_ms=LEASE, **kw)

    def one(self, storage: Storage, **job_fields: Any) -> Job:
        """Insert one job and claim it."""
        storage.insert([new_job(**job_fields)])
        [job] = self.claim(storage, limit=1)
        return job

    def kinds(self, storage: Storage, job_id: str) -> list[str]:
        return [e.kind for e in storage.events_after(0, 10_000) if e.job_id == job_id]
