"""Worker processes started by the runner: `python -m benchmarks.proc KIND ARGS...`.

Each waits for a common start time so several processes begin together, then
reports JSON on stdout: wall-clock start and end, and peak RSS.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from typing import Any


def peak_rss_mb() -> float:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def wait_until(start_at: float) -> None:
    while (delay := start_at - time.time()) > 0:
        time.sleep(min(delay, 0.01))


def jobcore_queue(db: str, sync: str, plugins: tuple[tuple[str, Any], ...] = ()) -> Any:
    from jobcore import Config, Queue, make_plugin_manager

    pm = make_plugin_manager(load_entrypoints=False, plugins=plugins)
    return Queue(db, config=Config(env={}, options={"synchronous": sync}), pm=pm)


def drain(db: str, sync: str, concurrency: str, start_at: str) -> None:
    from jobcore import Worker

    queue = jobcore_queue(db, sync)
    queue.storage.migrate()
    logging.getLogger("jobcore").setLevel(logging.WARNING)
    worker = Worker(queue, concurrency=int(concurrency), until_empty=True)
    wait_until(float(start_at))
    start = time.time()
    worker.run()
    print(
        json.dumps(
            {
                "start": start,
                "end": time.time(),
                "completed": worker.stats["completed"],
                "rss_mb": peak_rss_mb(),
            }
        )
    )


def enqueue(db: str, count: str) -> None:
    """Enqueue `count` noop jobs with every installed plugin (the otel one adds trace context)."""
    from jobcore import Config, Queue

    queue = Queue(db, config=Config(env={}, options={"synchronous": "FULL"}))
    n = int(count)
    for start in range(0, n, 5000):
        queue.enqueue_many("noop", [{}] * min(5000, n - start))
    queue.close()


def idle_worker(db: str) -> None:
    """A worker with default settings (synchronous=FULL) and the `stamp` job type."""
    from benchmarks import plugin
    from jobcore import Worker

    queue = jobcore_queue(db, "FULL", plugins=(("bench", plugin),))
    logging.getLogger("jobcore").setLevel(logging.WARNING)
    Worker(queue, install_signal_handlers=True).run()


def huey_drain(db: str, sync: str, count: str, start_at: str) -> None:
    from benchmarks import huey_app

    huey = huey_app.make_huey(db, sync)
    huey_app.register_tasks(huey)
    logging.getLogger("huey").setLevel(logging.WARNING)
    consumer = huey.create_consumer(
        workers=1, worker_type="thread", periodic=False, check_worker_health=False
    )
    wait_until(float(start_at))
    start = time.time()
    consumer.start()
    while huey_app.executed < int(count):
        time.sleep(0.0005)
    end = time.time()
    consumer.stop(graceful=True)
    print(
        json.dumps(
            {"start": start, "end": end, "completed": huey_app.executed, "rss_mb": peak_rss_mb()}
        )
    )


def huey_consumer(db: str) -> None:
    """Huey's consumer with its default settings (one worker thread, default polling)."""
    from benchmarks import huey_app

    huey = huey_app.make_huey(db, "FULL", results=True)
    huey_app.register_tasks(huey)
    logging.getLogger("huey").setLevel(logging.WARNING)
    consumer = huey.create_consumer(workers=1, worker_type="thread", periodic=False)
    consumer.start()
    threading.Event().wait()  # until SIGTERM ends the process


KINDS = {
    "drain": drain,
    "enqueue": enqueue,
    "idle-worker": idle_worker,
    "huey-drain": huey_drain,
    "huey-consumer": huey_consumer,
}

if __name__ == "__main__":
    KINDS[sys.argv[1]](*sys.argv[2:])
