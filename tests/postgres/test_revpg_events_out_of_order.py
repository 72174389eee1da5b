"""A reader resuming with small limits gets every `job:enqueued` event exactly once while
single and batch enqueues (rows of up to 1,024 jobs, migration 8) from several processes
commit out of seq order: each writer sleeps a random while before its commit."""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from jobcore_postgres.storage import PostgresStorage

WRITER = """
import random, sys, time
from jobcore.ids import new_id
from jobcore.models import NewJob
from jobcore_postgres.storage import PostgresStorage

url, seed, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
random.seed(seed)
store = PostgresStorage(url, poll_only=True)
for _ in range(rounds):
    size = random.choice([1, 1, 1, 2, 5, 1024, 1025, 1500])
    jobs = [NewJob(id=new_id(), type="noop", queue="default", payload={}, priority=0,
                   max_attempts=3, run_at=None, timeout_ms=None, idempotency_key=None)
            for _ in range(size)]
    with store.transaction():
        store.insert(jobs)
        time.sleep(random.random() * 0.03)
    print("\\n".join(j.id for j in jobs), flush=True)
store.close()
"""


def test_every_event_once_while_batches_commit_out_of_order(
    pg_storage_factory: Callable[..., PostgresStorage], pg_url: str, tmp_path: Path
) -> None:
    reader = pg_storage_factory(poll_only=True)
    outs = [tmp_path / f"writer{seed}.txt" for seed in range(3)]
    files = [out.open("w") for out in outs]
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, pg_url, str(seed), "12"], stdout=file)
        for seed, file in enumerate(files)
    ]
    pick = random.Random(7)
    cursor = 0
    ids: list[int] = []
    job_ids: list[str] = []

    def read() -> int:
        nonlocal cursor
        events = reader.events_after(cursor, pick.choice([1, 7, 100, 1000, 2000]))
        ids.extend(e.seq for e in events)
        job_ids.extend(e.job_id or "" for e in events)
        if events:
            cursor = events[-1].seq
        return len(events)

    while any(w.poll() is None for w in writers):
        read()
    assert [w.wait() for w in writers] == [0, 0, 0]
    for file in files:
        file.close()
    written = [line for out in outs for line in out.read_text().split()]
    while read():
        pass
    assert len(ids) == len(set(ids)), "an event id was delivered twice"
    assert sorted(job_ids) == sorted(written), "events lost or duplicated"
