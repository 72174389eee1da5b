"""The hub's change waiter on PostgreSQL hears claims and outcomes committed elsewhere at
once: their notifications (`no-work`) count as changes but poke no in-process subscriber."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from jobcore_http import waiter as waiter_module
from jobcore_http.waiter import ChangeWaiter
from jobcore_postgres.storage import PostgresStorage
from testenv import wait_for

from jobcore import Queue
from jobcore.models import Completed, Lease

Factory = Callable[..., PostgresStorage]


def test_an_outcome_committed_elsewhere_reaches_the_waiter_at_once(
    queue: Queue, pg_storage_factory: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        waiter_module, "PUSHED_CHECK", 5.0, raising=False
    )  # the periodic look cannot help
    storage: PostgresStorage = queue.storage  # type: ignore[assignment]
    waiter = ChangeWaiter(storage, storage.wake_key)
    changes = threading.Event()
    waiter.subscribe(changes.set)
    waiter.start()
    other = pg_storage_factory()  # another process's commits: no in-process wake-up
    try:
        other.insert([queue.build("noop", {})])
        wait_for(lambda: storage.pushes_changes, timeout=10)
        wait_for(changes.is_set, timeout=10)  # the insert (work) pokes it
        time.sleep(0.1)
        changes.clear()
        [job] = other.claim(worker="elsewhere", limit=1, lease_ms=60_000)
        assert changes.wait(1.0), "a claim committed elsewhere was not heard within 1 s"
        changes.clear()
        other.record([Completed(Lease.of(job), None)])
        assert changes.wait(1.0), "an outcome committed elsewhere was not heard within 1 s"
    finally:
        waiter.stop()
