"""procrastinate 3.10 (psycopg 3, asyncio): `python -m benchmarks.peers.procrastinate_bench`.

Its tables go into SCHEMA through the connection's search_path. Settings: the
psycopg pool holds concurrency + 2 connections (one per running job's status
update, one for LISTEN, one to fetch); the worker runs `wait=False`, which is
procrastinate's own "stop once caught up" drain; finished jobs are kept (the
default, `delete_jobs="never"`), like jobcore keeps them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from procrastinate import App, PsycopgConnector

from benchmarks.peers.common import latency_spacing, main, wait_until_async

completed = 0
stamps: list[float] = []  # ms from just before `defer_async` to the task's start
stamped = asyncio.Event()  # set once `wanted` stamps are in
wanted = 0


def make_app(dsn: str, schema: str, pool_size: int = 4) -> App:
    connector = PsycopgConnector(
        conninfo=dsn,
        kwargs={"options": f"-c search_path={schema}"},
        min_size=pool_size,
        max_size=pool_size,
    )
    app = App(connector=connector)

    @app.task(name="noop")
    async def noop() -> None:
        global completed
        completed += 1

    @app.task(name="stamp")
    async def stamp(t0: float) -> None:
        stamps.append((time.time() - t0) * 1000)
        if len(stamps) >= wanted:
            stamped.set()

    return app


async def install(dsn: str, schema: str) -> dict[str, Any]:
    app = make_app(dsn, schema, pool_size=1)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
    return {}


async def enqueue(dsn: str, schema: str, n: str, batch: str) -> dict[str, Any]:
    """`defer_async()` per job, or `batch_defer_async` of `batch` jobs per call."""
    app = make_app(dsn, schema, pool_size=1)
    count, size = int(n), int(batch)
    noop = app.tasks["noop"]
    async with app.open_async():
        start = time.perf_counter()
        if size == 1:
            for _ in range(count):
                await noop.defer_async()
        else:
            for first in range(0, count, size):
                await noop.batch_defer_async(*[{}] * min(size, count - first))
        seconds = time.perf_counter() - start
    return {"seconds": seconds}


async def fill(dsn: str, schema: str, n: str) -> dict[str, Any]:
    return await enqueue(dsn, schema, n, "1000")


async def drain(dsn: str, schema: str, concurrency: str, start_at: str) -> dict[str, Any]:
    app = make_app(dsn, schema, pool_size=int(concurrency) + 2)
    async with app.open_async():
        await wait_until_async(float(start_at))
        start = time.time()
        await app.run_worker_async(
            concurrency=int(concurrency), wait=False, install_signal_handlers=False
        )
        end = time.time()
    return {"start": start, "end": end, "completed": completed}


async def latency_worker(dsn: str, schema: str, k: str) -> dict[str, Any]:
    """An idle worker with default settings (woken by NOTIFY), until `k` `stamp` jobs started."""
    global wanted
    wanted = int(k)
    app = make_app(dsn, schema, pool_size=12)
    async with app.open_async():
        worker = asyncio.create_task(
            app.run_worker_async(concurrency=10, install_signal_handlers=False)
        )
        await stamped.wait()
        worker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await worker
    return {"latency_ms": stamps}


async def latency_producer(dsn: str, schema: str, k: str) -> dict[str, Any]:
    app = make_app(dsn, schema, pool_size=1)
    stamp = app.tasks["stamp"]
    async with app.open_async():
        for i in range(int(k)):
            await asyncio.sleep(latency_spacing(i))
            await stamp.defer_async(t0=time.time())
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
        }
    )
