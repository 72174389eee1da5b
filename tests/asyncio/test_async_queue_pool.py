"""`AsyncQueue` on PostgreSQL: its async pool's sessions are configured as the sync
store's, and a cancelled enqueue leaves no job and gives its connection back; on both
stores, workers of the same process are woken by an awaited enqueue, off the event loop."""

from __future__ import annotations

import asyncio
import secrets
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from jobcore import AsyncQueue, Queue, wakeup
from jobcore.testing import make_queue


def _pg_queue(database: str, **settings: Any) -> Queue:
    import jobcore_postgres

    made = make_queue(
        f"{database}?schema=a{secrets.token_hex(4)}",
        jobcore_postgres,
        plugin_settings={"postgres": settings} if settings else None,
    )
    made.storage.migrate()
    return made


@pytest.fixture
def pg_queue(pg_server_database: str) -> Iterator[Queue]:
    made = _pg_queue(pg_server_database)
    yield made
    made.close()


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


def test_async_sessions_have_the_stores_settings(pg_server_database: str) -> None:
    queue = _pg_queue(pg_server_database, synchronous_commit="off")

    async def main() -> tuple[str, str, object]:
        async with AsyncQueue(queue=queue) as aq:
            await aq.enqueue("noop", {})
            pool = await aq._native.pool()
            async with pool.connection() as conn:
                sync_commit = await (await conn.execute("SHOW synchronous_commit")).fetchone()
                seqscan = await (await conn.execute("SHOW enable_seqscan")).fetchone()
                return sync_commit[0], seqscan[0], conn.prepare_threshold

    try:
        with queue.storage._pool.connection() as sync_conn:  # the sync store's sessions
            sync_side = sync_conn.execute("SHOW synchronous_commit").fetchone()
        assert sync_side == ("off",)
        assert asyncio.run(main()) == ("off", "off", 5)  # as the sync pool's sessions
    finally:
        queue.close()


def test_no_prepared_statements_on_async_sessions_behind_a_pooling_proxy(
    pg_server_database: str,
) -> None:
    queue = _pg_queue(pg_server_database, poll_only=True)

    async def main() -> tuple[object, int]:
        async with AsyncQueue(queue=queue) as aq:
            for _ in range(8):  # past psycopg's default threshold (5)
                await aq.enqueue("noop", {})
            pool = await aq._native.pool()
            async with pool.connection() as conn:
                row = await (
                    await conn.execute("SELECT count(*) FROM pg_prepared_statements")
                ).fetchone()
                return conn.prepare_threshold, row[0]

    try:
        assert asyncio.run(main()) == (None, 0)
        assert queue.storage.count_by_status().get("pending") == 8
    finally:
        queue.close()


def test_a_cancelled_enqueue_leaves_no_job_and_gives_its_connection_back(
    pg_queue: Queue,
) -> None:
    storage: Any = pg_queue.storage
    jobs_table = f"{storage.schema}.jobs"

    async def main() -> dict[str, int]:
        async with AsyncQueue(queue=pg_queue) as aq:
            await aq.enqueue("noop", {})  # the pool open, one job
            with psycopg.connect(storage.target.conninfo) as locker:
                locker.execute(f"LOCK TABLE {jobs_table} IN ACCESS EXCLUSIVE MODE")
                task = asyncio.ensure_future(aq.enqueue("noop", {"sleep": 0.001}))
                for _ in range(500):  # until the insert waits for the lock on the server
                    await asyncio.sleep(0.02)
                    with psycopg.connect(storage.target.conninfo, autocommit=True) as look:
                        waiting = look.execute(
                            "SELECT count(*) FROM pg_stat_activity "
                            "WHERE datname = current_database() AND wait_event_type = 'Lock' "
                            "AND query LIKE '%INSERT INTO%'"
                        ).fetchone()
                    if waiting and waiting[0]:
                        break
                else:
                    pytest.fail("the insert never waited for the lock")
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                locker.rollback()
            after = await aq.enqueue("noop", {"sleep": 0.002})  # the pool still serves
            assert after.created
            pool = await aq._native.pool()
            stats = pool.get_stats()
            return {"size": stats["pool_size"], "available": stats["pool_available"]}

    stats = asyncio.run(main())
    assert stats["available"] == stats["size"]  # no connection left checked out
    # the first job and the one after; not the cancelled one (sleep 0.001)
    assert sorted(job.payload["sleep"] for job in pg_queue.list_jobs(limit=10)) == [0.0, 0.002]


def test_a_worker_subscribed_in_the_process_is_still_woken_off_the_loop(queue: Queue) -> None:
    woken: list[str] = []
    event = threading.Event()

    def wake() -> None:
        woken.append(threading.current_thread().name)
        event.set()

    wakeup.subscribe(queue.wake_key, wake)
    try:

        async def main() -> str:
            async with AsyncQueue(queue=queue) as aq:
                await aq.enqueue("noop", {})
            return threading.current_thread().name

        loop_thread = asyncio.run(main())
        assert event.wait(10)
        assert woken and loop_thread not in woken
    finally:
        wakeup.unsubscribe(queue.wake_key, wake)
