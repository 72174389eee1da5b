"""Quickstart: enqueue a handful of jobs into ./jobcore.db and drain them with one worker.

Run it from anywhere: `python examples/quickstart.py`. It uses only the core
(the built-in `noop` job type), so it needs no plugin and no configuration.
"""

from __future__ import annotations

import logging
import os

from jobcore import Config, Queue, Worker
from jobcore.logs import configure_logging


def main() -> None:
    configure_logging("text", level=logging.ERROR)  # keep the example's own output readable
    db = os.environ.get("JOBCORE_DB", "jobcore.db")
    # retry failed attempts at once (the default backoff starts at 1s and doubles)
    queue = Queue(db, config=Config.load(options={"backoff_base": 0.0}))

    print(f"enqueuing 5 jobs into {db}")
    jobs = [
        queue.enqueue("noop", {}).job,
        queue.enqueue("noop", {"sleep": 0.2}, priority=5).job,  # higher priority runs first
        queue.enqueue("noop", {"sleep": 0.1}, idempotency_key="nightly-report").job,
        queue.enqueue("noop", {"fail": True}, max_attempts=2).job,  # fails, retries, ends failed
        queue.enqueue("noop", {}, delay=3600).job,  # scheduled for an hour from now
    ]
    duplicate = queue.enqueue("noop", {"sleep": 0.1}, idempotency_key="nightly-report")
    print(
        f"enqueuing 'nightly-report' again: created={duplicate.created} (same job {duplicate.job.id})"
    )

    # A real deployment runs `jobcore run`; here one worker drains what is due and returns.
    Worker(queue, concurrency=2, until_empty=True).run()

    print("\nwhat happened:")
    for job in jobs:
        job = queue.get(job.id)
        detail = f" ({job.last_error})" if job.last_error else ""
        print(
            f"  {job.id}  {job.status:<9}  attempts={job.attempts}  payload={job.payload}{detail}"
        )
    counts = queue.stats().counts
    print("\ntotals:", ", ".join(f"{status} {n}" for status, n in sorted(counts.items())))
    print("next: `jobcore list`, `jobcore show ID`, `jobcore stats`, `jobcore run`")
    queue.close()


if __name__ == "__main__":
    main()
