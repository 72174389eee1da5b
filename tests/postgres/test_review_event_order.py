"""Review: on PostgreSQL an event whose transaction commits after a later-numbered one
must still reach an event stream reading `events_after(cursor)` (fixed by
`jobcore_postgres.event_order`; more races in test_pg_event_order.py).

`seq` is an identity column: numbers are taken at INSERT, rows become visible at
COMMIT, so two writers (two hubs, a hub and a worker, the hub's engine and a
CLI) can commit seq 2 before seq 1. A stream that read 2 resumes after 2 and
skipped 1 for ever: `Last-Event-ID` lost events (DESIGN §11 says without loss).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


def test_an_event_committed_late_is_still_delivered(
    pg_storage_factory: Callable[..., Any],
) -> None:
    first_writer = pg_storage_factory()
    other_writer = pg_storage_factory()
    reader = pg_storage_factory()
    start = reader.last_event_seq()
    inserted = threading.Event()
    may_commit = threading.Event()

    def slow_transaction() -> None:
        with first_writer.transaction():
            first_writer.add_event("job:slow", job_id="a")
            inserted.set()
            may_commit.wait(10)

    thread = threading.Thread(target=slow_transaction)
    thread.start()
    assert inserted.wait(10)
    other_writer.add_event("job:fast", job_id="b")  # a later seq, committed first
    seen = reader.events_after(start)
    cursor = seen[-1].seq if seen else start  # what a stream sends as `id:`
    may_commit.set()
    thread.join(10)
    seen += reader.events_after(cursor)  # the client resumes with Last-Event-ID = cursor
    assert sorted(event.kind for event in seen) == ["job:fast", "job:slow"]
