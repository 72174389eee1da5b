"""Oban for Python 0.7 (psycopg 3, uvloop like its CLI): `python -m benchmarks.peers.oban_bench`.

Needs Python >= 3.12, so it runs in its own environment (made by
`python -m benchmarks.setup_peers --oban`). Its tables go into SCHEMA as Oban's `prefix`. The
worker is one `Oban` with `queues={"default": CONCURRENCY}` and a pool of
concurrency + 2 connections; other settings are Oban's defaults (a fetch is
debounced 5 ms after completions; outcomes are acknowledged in batches).
Oban has no drain mode: a watcher asks the table every 10 ms whether any job
is still available or executing, then stops the instance.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from oban import Job, Oban, worker
from oban.schema import install as install_schema

from benchmarks.peers.common import latency_spacing, main, wait_until_async

completed = 0
stamps: list[float] = []  # ms from just before `Oban.enqueue` to the job's start
stamped = asyncio.Event()  # set once `wanted` stamps are in
wanted = 0


@worker(queue="default")
class Noop:
    async def process(self, job: Job) -> None:
        global completed
        completed += 1


@worker(queue="default")
class Stamp:
    async def process(self, job: Job) -> None:
        stamps.append((time.time() - job.args["t0"]) * 1000)
        if len(stamps) >= wanted:
            stamped.set()


def _noop_job() -> Job:
    worker_class: Any = Noop  # `@worker` adds `new`, which type checkers cannot see
    job: Job = worker_class.new({})
    return job


async def install(dsn: str, schema: str) -> dict[str, Any]:
    pool = await Oban.create_pool(dsn, min_size=1, max_size=1)
    await install_schema(pool, prefix=schema)
    await pool.close()
    return {}


async def enqueue(dsn: str, schema: str, n: str, batch: str) -> dict[str, Any]:
    """`Oban.enqueue` per job, or `enqueue_many` of `batch` jobs per call (client mode)."""
    pool = await Oban.create_pool(dsn, min_size=1, max_size=2)
    count, size = int(n), int(batch)
    async with Oban(pool=pool, prefix=schema) as oban:
        start = time.perf_counter()
        if size == 1:
            for _ in range(count):
                await oban.enqueue(_noop_job())
        else:
            for first in range(0, count, size):
                await oban.enqueue_many([_noop_job() for _ in range(min(size, count - first))])
        seconds = time.perf_counter() - start
    await pool.close()
    return {"seconds": seconds}


async def fill(dsn: str, schema: str, n: str) -> dict[str, Any]:
    return await enqueue(dsn, schema, n, "1000")


async def _until_drained(pool: Any, schema: str) -> None:
    query = (
        f"SELECT EXISTS (SELECT 1 FROM {schema}.oban_jobs "
        "WHERE state IN ('available', 'executing'))"
    )
    while True:
        async with pool.connection() as conn:
            row = await (await conn.execute(query)).fetchone()
        if not row[0]:
            return
        await asyncio.sleep(0.01)


async def drain(dsn: str, schema: str, concurrency: str, start_at: str) -> dict[str, Any]:
    limit = int(concurrency)
    pool = await Oban.create_pool(dsn, min_size=limit + 2, max_size=limit + 2)
    watch = await Oban.create_pool(dsn, min_size=1, max_size=1)
    oban = Oban(pool=pool, prefix=schema, queues={"default": limit})
    await wait_until_async(float(start_at))
    start = time.time()
    await oban.start()
    await _until_drained(watch, schema)
    end = time.time()
    await oban.stop()
    await pool.close()
    await watch.close()
    return {"start": start, "end": end, "completed": completed}


async def latency_worker(dsn: str, schema: str, k: str) -> dict[str, Any]:
    """An idle `Oban(queues={"default": 10})`, woken by its insert notification, until
    `k` `Stamp` jobs started."""
    global wanted
    wanted = int(k)
    pool = await Oban.create_pool(dsn, min_size=12, max_size=12)
    async with Oban(pool=pool, prefix=schema, queues={"default": 10}):
        await stamped.wait()
    await pool.close()
    return {"latency_ms": stamps}


async def latency_producer(dsn: str, schema: str, k: str) -> dict[str, Any]:
    pool = await Oban.create_pool(dsn, min_size=1, max_size=2)
    stamp: Any = Stamp  # `@worker` adds `new`, which type checkers cannot see
    async with Oban(pool=pool, prefix=schema) as oban:
        for i in range(int(k)):
            await asyncio.sleep(latency_spacing(i))
            await oban.enqueue(stamp.new({"t0": time.time()}))
    await pool.close()
    return {}


if __name__ == "__main__":
    main(
        {
            "install": install,
            "enqueue": enqueue,
            "fill": fill,
            "drain": drain,
            "latency-worker": latency_worker,
            "latency-producer": latency_producer,
        },
        use_uvloop=True,
    )
