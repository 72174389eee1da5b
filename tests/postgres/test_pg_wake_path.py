"""How a PostgreSQL worker learns of other connections' commits: LISTEN/NOTIFY, not polling.

Every worker here polls once an hour and checks for changes once an hour, so
anything it does sooner was set off by a notification. The jobs come from a
second store handle: its writes wake nobody in this process by themselves.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path

import jobcore_postgres
import psycopg
import pytest
from jobcore_postgres.schema import channel
from jobcore_postgres.storage import PostgresStorage
from pg_testing import HOUR, count_calls, start_idle_worker
from testenv import wait_for

from jobcore import JobStatus, Queue
from jobcore.models import Completed, Lease
from jobcore.testing import make_queue

Factory = Callable[..., PostgresStorage]


@pytest.fixture
def queue(idle_queue: Queue) -> Queue:
    return idle_queue  # conftest: workers poll hourly


def test_a_statement_that_appends_no_event_sends_no_notification(
    queue: Queue, pg_storage_factory: Factory
) -> None:
    storage = pg_storage_factory()
    with psycopg.connect(storage.target.conninfo, autocommit=True) as listen:
        listen.execute(f"LISTEN {channel(storage.schema)}")
        # an empty claim's event insert adds no row: before, it notified every listener,
        # and each notification made every idle worker claim again, round and round
        assert storage.claim(worker="w", limit=5, lease_ms=60_000) == []
        assert storage.commit_batch([], worker="w", claim_limit=5, lease_ms=60_000) == ([], [])
        storage.insert([queue.build("noop", {})])
        got = list(listen.notifies(timeout=0.5))
    assert len(got) == 1  # the insert's, and only it


def test_another_connections_commit_wakes_an_idle_worker(
    queue: Queue, pg_storage_factory: Factory
) -> None:
    worker, thread = start_idle_worker(queue)
    try:
        job = queue.build("noop", {})
        pg_storage_factory().insert([job])  # no in-process wake-up: only its notification
        # the next poll and the next change check are an hour away
        wait_for(lambda: queue.get(job.id).status is JobStatus.COMPLETED, timeout=30)
    finally:
        worker.stop()
        thread.join(10)


def test_claims_and_outcomes_elsewhere_do_not_wake_an_idle_worker(
    queue: Queue, pg_storage_factory: Factory
) -> None:
    counts = count_calls(queue.storage, "commit_batch")
    worker, thread = start_idle_worker(queue)
    other = pg_storage_factory()
    counts["commit_batch"] = 0  # from here on
    try:
        foreign = [dataclasses.replace(queue.build("noop", {}), type="elsewhere") for _ in range(2)]
        other.insert(foreign[:1])  # new work, if not for this worker: it looks once
        wait_for(lambda: counts["commit_batch"] == 1, timeout=30)
        [job] = other.claim(worker="elsewhere", limit=1, lease_ms=60_000, types=["elsewhere"])
        other.record([Completed(Lease.of(job), None)])
        time.sleep(0.5)  # the notifications of that claim and that outcome have come
        assert counts["commit_batch"] == 1  # they took and ended work: nothing to look for
        other.insert(foreign[1:])
        wait_for(lambda: counts["commit_batch"] == 2, timeout=30)
    finally:
        worker.stop()
        thread.join(10)


def test_an_idle_worker_on_a_listening_store_does_not_poll_it(pg_url: str) -> None:
    queue = make_queue(pg_url, jobcore_postgres, poll_interval=HOUR, wake_check_interval=0.001)
    queue.storage.migrate()
    counts = count_calls(queue.storage, "wait_for_change")
    worker, thread = start_idle_worker(queue)
    try:
        before = counts["wait_for_change"]
        time.sleep(0.5)  # polling every wake_check_interval would check hundreds of times
        assert counts["wait_for_change"] - before == 0
    finally:
        worker.stop()
        thread.join(10)
        queue.close()


def test_a_cancel_from_another_connection_reaches_a_busy_worker_with_no_deadline(
    queue: Queue, pg_storage_factory: Factory, tmp_path: Path
) -> None:
    # every slot busy with a job that has no timeout: the loop's wait has no deadline at all
    worker, thread = start_idle_worker(queue, concurrency=1, prefetch=0)
    other = pg_storage_factory()
    try:
        started = tmp_path / "started"
        job = dataclasses.replace(
            queue.build("sleepy", {"seconds": HOUR, "cooperative": True, "started": str(started)}),
            timeout_ms=None,
        )
        other.insert([job])
        wait_for(started.exists, timeout=30)
        wait_for(lambda: queue.get(job.id).started_at is not None, timeout=30)  # nothing due
        other.cancel([job.id])
        wait_for(lambda: queue.get(job.id).status is JobStatus.CANCELLED, timeout=30)
        assert thread.is_alive()
    finally:
        worker.stop()
        thread.join(10)


def completed(queue: Queue) -> int:
    return queue.stats().counts.get("completed", 0)


def test_a_draining_worker_does_not_look_for_work_after_its_own_commits(
    queue: Queue, pg_storage_factory: Factory
) -> None:
    # Each group commit (claims, outcomes) notifies as 'no-work'. Counted as a change, it
    # made the next loop a full poll: promote, next_due(), now(), cancel_requested() per commit.
    worker, thread = start_idle_worker(queue, concurrency=4, prefetch=0)
    counts = count_calls(queue.storage, "next_due", "cancel_requested", "commit_batch")
    try:
        jobs = [queue.build("noop", {}) for _ in range(200)]
        pg_storage_factory().insert(jobs)  # one notification that brings work
        wait_for(lambda: completed(queue) == len(jobs), timeout=60)
        assert counts["commit_batch"] >= len(jobs) // 4  # it drained in many commits
        # the insert's notification (and maybe the listener's start): a few full polls,
        # not one per commit
        assert counts["next_due"] <= 5
        assert counts["cancel_requested"] <= 5
    finally:
        worker.stop()
        thread.join(10)


def test_work_made_by_a_workers_own_commits_is_still_claimed(
    queue: Queue, pg_storage_factory: Factory
) -> None:
    # children enqueued and retries scheduled by its own outcomes notify as work
    worker, thread = start_idle_worker(queue)
    try:
        parent = queue.build("parent", {"children": 3})
        retried = queue.build("fail", {"how": "retry_after", "seconds": 0.2})
        pg_storage_factory().insert([parent])
        wait_for(lambda: completed(queue) == 4, timeout=30)
        pg_storage_factory().insert([retried])
        wait_for(lambda: queue.get(retried.id).attempts >= 2, timeout=30)
    finally:
        worker.stop()
        thread.join(10)


def test_wait_for_work_skips_claims_and_outcomes_that_wait_for_change_sees(
    queue: Queue, pg_storage_factory: Factory
) -> None:
    storage, other = queue.storage, pg_storage_factory()
    other.insert([queue.build("noop", {}), queue.build("noop", {})])
    while storage.wait_for_change(0.3) or storage.wait_for_work(0.3):
        pass  # the first waits, the insert: seen
    assert storage.pushes_changes
    first, second = other.claim(worker="elsewhere", limit=2, lease_ms=60_000)
    other.record([Completed(Lease.of(first), None)])
    assert storage.wait_for_change(10)  # the hub's waiter hears every commit
    assert not storage.wait_for_work(0.5)  # nothing to claim, nothing to cancel
    other.cancel([second.id])  # a cancel request of a claimed job appends no event
    assert storage.wait_for_work(10)
    other.insert([queue.build("noop", {})])
    assert storage.wait_for_work(10)
