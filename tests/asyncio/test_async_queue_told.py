"""`AsyncQueue` tells `jobcore_job_enqueued` for every committed job, off the event loop,
in batches (one hand-over to its thread per burst), and before `aclose()` returns; never
closed, the jobs are still told before the process exits."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from testenv import subprocess_env

from jobcore import AsyncQueue, Job, Queue, hookimpl
from jobcore.testing import make_queue


class Told:
    """Records each `jobcore_job_enqueued` with the thread it ran on."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[tuple[str, str]] = []

    @hookimpl
    def jobcore_job_enqueued(self, job: Job) -> None:
        with self.lock:
            self.calls.append((job.id, threading.current_thread().name))


@pytest.fixture
def told() -> Told:
    return Told()


@pytest.fixture
def queue(store_url: str, told: Told) -> Iterator[Queue]:
    plugins: list[Any] = [told]
    if store_url.startswith("postgresql"):
        import jobcore_postgres

        plugins.append(jobcore_postgres)
    made = make_queue(store_url, *plugins)
    made.storage.migrate()
    yield made
    made.close()


def test_every_enqueued_job_is_told_once_off_the_loop_by_aclose(queue: Queue, told: Told) -> None:
    async def main() -> tuple[list[str], str]:
        async with AsyncQueue(queue=queue) as aq:
            one_by_one = [(await aq.enqueue("noop", {})).job.id for _ in range(30)]
            together = await asyncio.gather(*(aq.enqueue("noop", {}) for _ in range(30)))
            many = await aq.enqueue_many("noop", [{}] * 5)
            again = await aq.enqueue("noop", {}, idempotency_key="k")
            await aq.enqueue("noop", {}, idempotency_key="k")  # not created: not told
            ids = one_by_one + [i.job.id for i in together] + [m.job.id for m in many]
            return [*ids, again.job.id], threading.current_thread().name

    ids, loop_thread = asyncio.run(main())
    assert sorted(job_id for job_id, _ in told.calls) == sorted(ids)  # each once, by aclose
    assert loop_thread not in {thread for _, thread in told.calls}


def test_an_async_queue_never_closed_still_tells_before_exit(tmp_path: Path) -> None:
    log = tmp_path / "told"
    script = tmp_path / "producer.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import asyncio
            from jobcore import AsyncQueue, Job, hookimpl
            from jobcore.testing import make_queue

            class Told:
                @hookimpl
                def jobcore_job_enqueued(self, job: Job) -> None:
                    with open({str(log)!r}, "a") as out:
                        out.write(job.id + "\\n")

            queue = make_queue({str(tmp_path / "q.db")!r}, Told())

            async def main() -> None:
                aq = AsyncQueue(queue=queue)  # never closed
                for _ in range(20):
                    print((await aq.enqueue("noop", {{}})).job.id, flush=True)

            asyncio.run(main())
            """
        )
    )
    ran = subprocess.run(
        [sys.executable, str(script)],
        env=subprocess_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    assert sorted(log.read_text().split()) == sorted(ran.stdout.split())
    assert len(ran.stdout.split()) == 20
