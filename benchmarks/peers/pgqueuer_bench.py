"""pgqueuer 1.6 (asyncpg, uvloop like its CLI): `python -m benchmarks.peers.pgqueuer_bench`.

Its tables go into SCHEMA through the connection's search_path, installed with
its default durability (`durable`: every table logged, as jobcore's are). The
worker is one `PgQueuer` on one asyncpg connection, as pgqueuer's own
benchmark runs it: `batch_size=10` (its default; ten jobs picked per round
trip, which is its concurrency), no global task cap, and `mode=drain` (exit once
the queue is empty and the jobs in flight finished).
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import asyncpg
from pgqueuer import AsyncpgDriver, PgQueuer, Queries
from pgqueuer.models import Job
from pgqueuer.types import QueueExecutionMode

from benchmarks.peers.common import latency_spacing, main, wait_until_async


async def connect(dsn: str, schema: str) -> asyncpg.Connection:
    return await asyncpg.connect(dsn, server_settings={"search_path": schema})


async def install(dsn: str, schema: str) -> dict[str, Any]:
    conn = await connect(dsn, schema)
    await Queries(AsyncpgDriver(conn)).install(create_schema=False)
    await conn.close()
    return {}


async def enqueue(dsn: str, schema: str, n: str, batch: str) -> dict[str, Any]:
    """`Queries.enqueue` of one job per call, or of lists of `batch` jobs per call."""
    conn = await connect(dsn, schema)
    queries = Queries(AsyncpgDriver(conn))
    count, size = int(n), int(batch)
    start = time.perf_counter()
    if size == 1:
        for _ in range(count):
            await queries.enqueue("noop", None)
    else:
        for first in range(0, count, size):
            part = min(size, count - first)
            await queries.enqueue(["noop"] * part, [None] * part, [0] * part)
    seconds = time.perf_counter() - start
    await conn.close()
    return {"seconds": seconds}


async def fill(dsn: str, schema: str, n: str) -> dict[str, Any]:
    return await enqueue(dsn, schema, n, "1000")


async def drain(dsn: str, schema: str, concurrency: str, start_at: str) -> dict[str, Any]:
    conn = await connect(dsn, schema)
    pgq = PgQueuer(AsyncpgDriver(conn))
    completed = 0

    @pgq.entrypoint("noop")
    async def noop(job: Job) -> None:
        nonlocal completed
        completed += 1

    await wait_until_async(float(start_at))
    start = time.time()
    await pgq.run(batch_size=int(concurrency), mode=QueueExecutionMode.drain)
    end = time.time()
    await conn.close()
    return {"start": start, "end": end, "completed": completed}


async def latency_worker(dsn: str, schema: str, k: str) -> dict[str, Any]:
    """An idle worker woken by pgqueuer's NOTIFY; each `stamp` job's payload is
    time.time() just before its enqueue; stops after `k` jobs."""
    conn = await connect(dsn, schema)
    pgq = PgQueuer(AsyncpgDriver(conn))
    values: list[float] = []

    @pgq.entrypoint("stamp")
    async def stamp(job: Job) -> None:
        values.append((time.time() - float(job.payload or b"0")) * 1000)
        if len(values) >= int(k):
            pgq.shutdown.set()

    await pgq.run(batch_size=10, dequeue_timeout=timedelta(seconds=30))
    await conn.close()
    return {"latency_ms": values}


async def latency_producer(dsn: str, schema: str, k: str) -> dict[str, Any]:
    conn = await connect(dsn, schema)
    queries = Queries(AsyncpgDriver(conn))
    for i in range(int(k)):
        await asyncio.sleep(latency_spacing(i))
        await queries.enqueue("stamp", repr(time.time()).encode())
    await conn.close()
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
