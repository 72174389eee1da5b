"""Job types of `benchmarks/async.py`, declared with `@job_type` (a plugin module as it is)."""

from __future__ import annotations

import asyncio
import time

from jobcore import JobContext, Payload, job_type

LAST_DONE = [0.0]
"""time.perf_counter() when the latest handler of this process returned."""


class Sleep(Payload):
    seconds: float = 0.0


@job_type("bench_async_sleep")
async def bench_async_sleep(payload: Sleep, ctx: JobContext) -> None:
    if payload.seconds:
        await asyncio.sleep(payload.seconds)
    LAST_DONE[0] = time.perf_counter()


@job_type("bench_sync_sleep")
def bench_sync_sleep(payload: Sleep, ctx: JobContext) -> None:
    if payload.seconds:
        time.sleep(payload.seconds)
    LAST_DONE[0] = time.perf_counter()
