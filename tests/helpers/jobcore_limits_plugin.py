"""Job types with concurrency limits for the limits tests (DESIGN §16), loadable in worker
subprocesses with JOBCORE_PLUGINS=jobcore_limits_plugin.

Each handler records how many jobs of its group run at once in a SQLite file (`tally`),
updated in write transactions, so the highest overlap across processes is exact.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from jobcore import JobContext, Payload, job_type


class Work(Payload):
    tally: str
    sleep: float = 0.0
    customer: str = ""
    touch: str = ""  # a file created when the handler starts


def _tally(path: str, group: str, step: int) -> None:
    conn = sqlite3.connect(path, timeout=60, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS running (grp TEXT PRIMARY KEY, now INTEGER, peak INTEGER,"
            " runs INTEGER)"
        )
        conn.execute(
            "INSERT INTO running VALUES (?, ?, max(?, 0), max(?, 0)) ON CONFLICT (grp) DO UPDATE "
            "SET now = now + excluded.now, peak = max(peak, now + excluded.now), "
            "runs = runs + max(excluded.now, 0)",
            (group, step, step, step),
        )
        conn.execute("COMMIT")
    finally:
        conn.close()


def _run(payload: Work, group: str) -> None:
    _tally(payload.tally, group, 1)
    if payload.touch:
        Path(payload.touch).touch()
    try:
        time.sleep(payload.sleep)
    finally:
        _tally(payload.tally, group, -1)


@job_type("limited", concurrency=3)
def limited(payload: Work, ctx: JobContext) -> None:
    """At most 3 at once in the whole store."""
    _run(payload, "limited")


@job_type("per_customer", concurrency=1, concurrency_key="customer")
def per_customer(payload: Work, ctx: JobContext) -> None:
    """At most 1 at once per customer; the type's own tally counts all customers at once."""
    _tally(payload.tally, "per_customer", 1)
    try:
        _run(payload, f"customer:{payload.customer}")
    finally:
        _tally(payload.tally, "per_customer", -1)


@job_type("free")
def free(payload: Work, ctx: JobContext) -> None:
    """No limit of its own (a queue limit may apply)."""
    _run(payload, f"queue:{ctx.job.queue}")
