"""`AsyncQueue`: producers in asyncio code on SQLite and PostgreSQL, and the async outbox."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Iterator
from typing import Any

import apsw
import pytest

from jobcore import AsyncQueue, IllegalTransition, InvalidPayload, JobNotFound, JobStatus, Queue
from jobcore.errors import JobcoreError, StorageError
from jobcore.testing import make_queue


@pytest.fixture
def queue(store_url: str) -> Iterator[Queue]:
    plugins: list[Any] = []
    if store_url.startswith("postgresql"):
        import jobcore_postgres

        plugins.append(jobcore_postgres)
    made = make_queue(store_url, *plugins)
    made.storage.migrate()
    yield made
    made.close()


def test_enqueue_from_a_thousand_concurrent_tasks(queue: Queue) -> None:
    async def main() -> list[str]:
        async with AsyncQueue(queue=queue) as aq:
            inserted = await asyncio.gather(
                *(aq.enqueue("noop", {"sleep": 0}, priority=i % 3) for i in range(1000))
            )
            return [item.job.id for item in inserted if item.created]

    ids = asyncio.run(main())
    assert len(set(ids)) == 1000
    assert queue.storage.count_by_status().get("pending") == 1000


def test_the_producer_calls_round_trip(queue: Queue) -> None:
    enqueued_on: list[str] = []

    async def main() -> None:
        loop_thread = threading.current_thread().name
        async with AsyncQueue(queue=queue) as aq:
            first = await aq.enqueue("noop", {}, idempotency_key="k1")
            again = await aq.enqueue("noop", {}, idempotency_key="k1")
            assert (first.created, again.created, again.job.id) == (True, False, first.job.id)
            many = await aq.enqueue_many("noop", [{"sleep": 0}, {"fail": True}], queue="q2")
            assert [m.job.queue for m in many] == ["q2", "q2"]
            got = await aq.get(many[1].job.id)
            assert (got.payload["fail"], got.status) == (True, JobStatus.PENDING)
            [cancelled] = await aq.cancel([got.id])
            assert cancelled.status is JobStatus.CANCELLED
            [retried] = await aq.retry([got.id])
            assert retried.status is JobStatus.PENDING
            with pytest.raises(IllegalTransition):
                await aq.retry([first.job.id])
            with pytest.raises(JobNotFound):
                await aq.get("no-such-id")
            with pytest.raises(InvalidPayload, match="sleep"):
                await aq.enqueue("noop", {"sleep": -1})
            enqueued_on.append(loop_thread)

    asyncio.run(main())
    assert enqueued_on == ["MainThread"]
    assert queue.storage.count_by_status().get("pending") == 3


def test_conn_on_sqlite_is_refused_saying_why(tmp_path: Any) -> None:
    queue = make_queue(tmp_path / "q.db")

    async def main() -> None:
        async with AsyncQueue(queue=queue) as aq:
            with pytest.raises(StorageError, match="needs a store with async connections"):
                await aq.enqueue("noop", {}, conn=object())

    asyncio.run(main())
    assert queue.storage.count_by_status() == {}
    queue.close()


def test_one_async_queue_across_two_asyncio_runs(queue: Queue) -> None:
    aq = AsyncQueue(queue=queue)

    async def once() -> str:
        return (await aq.enqueue("noop", {})).job.id

    first, second = asyncio.run(once()), asyncio.run(once())
    asyncio.run(aq.aclose())
    assert first != second
    assert queue.storage.count_by_status().get("pending") == 2


def test_concurrent_enqueues_with_one_idempotency_key_make_one_job(queue: Queue) -> None:
    async def main() -> list[tuple[str, bool]]:
        async with AsyncQueue(queue=queue) as aq:
            made = await asyncio.gather(
                *(aq.enqueue("noop", {}, idempotency_key="same") for _ in range(20)),
                *(aq.enqueue("noop", {}) for _ in range(20)),
            )
            return [(m.job.id, m.created) for m in made[:20]]

    keyed = asyncio.run(main())
    assert len({job_id for job_id, _ in keyed}) == 1
    assert sum(created for _, created in keyed) == 1
    assert queue.storage.count_by_status().get("pending") == 21


def test_a_second_running_loop_is_refused_not_left_hanging(queue: Queue) -> None:
    aq = AsyncQueue(queue=queue)
    first_running, release = threading.Event(), threading.Event()

    async def hold() -> None:
        await aq.enqueue("noop", {})
        first_running.set()
        while not release.is_set():  # this loop stays alive, owning the AsyncQueue
            await asyncio.sleep(0.01)

    holder = threading.Thread(target=asyncio.run, args=(hold(),))
    holder.start()
    try:
        assert first_running.wait(30)

        async def other() -> Any:
            return await asyncio.wait_for(aq.enqueue("noop", {}), 10)

        with pytest.raises(JobcoreError, match="make one AsyncQueue per event loop"):
            asyncio.run(other())
    finally:
        release.set()
        holder.join(30)
    # its loop ended: the next loop takes the AsyncQueue over
    asyncio.run(aq.enqueue("noop", {}))
    asyncio.run(aq.aclose())
    assert queue.storage.count_by_status().get("pending") == 2


def _writing_on_the_thread() -> bool:
    """The AsyncQueue's thread is inside its grouped write (SQLite)."""
    frames = sys._current_frames()
    for thread in threading.enumerate():
        if thread.name.startswith("jobcore-async-queue_"):  # not the teller's
            frame = frames.get(thread.ident or 0)
            while frame is not None:
                if frame.f_code.co_name == "_insert_groups":
                    return True
                frame = frame.f_back
    return False


def test_a_cancelled_enqueue_still_waiting_for_the_thread_writes_nothing(sqlite_url: str) -> None:
    """SQLite: a call cancelled while its jobs wait for the AsyncQueue's thread writes
    nothing; one whose write the thread had begun commits all the same (docs/asyncio.md)."""
    queue = make_queue(sqlite_url)
    queue.storage.migrate()

    async def main() -> None:
        async with AsyncQueue(queue=queue) as aq:
            await aq.enqueue("noop", {"sleep": 0.0})  # the store open
            locker = apsw.Connection(sqlite_url)  # the store's SQLite (locks in one process)
            try:
                locker.execute("BEGIN IMMEDIATE")  # the thread's next write waits for this
                begun = asyncio.ensure_future(aq.enqueue("noop", {"sleep": 0.001}))
                while not _writing_on_the_thread():
                    await asyncio.sleep(0.005)
                first = aq._committer
                waiting = asyncio.ensure_future(aq.enqueue("noop", {"sleep": 0.002}))
                while aq._committer is first or aq._waiting:  # handed to the busy thread
                    await asyncio.sleep(0.005)
                for task in (waiting, begun):
                    task.cancel()
                    with pytest.raises(asyncio.CancelledError):
                        await task
            finally:
                locker.execute("ROLLBACK")
                locker.close()
            await aq.enqueue("noop", {"sleep": 0.003})  # after both groups

    asyncio.run(main())
    try:
        sleeps = sorted(job.payload["sleep"] for job in queue.list_jobs(limit=10))
        assert sleeps == [0.0, 0.001, 0.003]
    finally:
        queue.close()
