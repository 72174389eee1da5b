"""A batch enqueue appends one `job:enqueued` row per 1024 jobs (migration 8); readers, the
hub's event stream and `Last-Event-ID` still see one event per job, each with its own id."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from jobcore_postgres.schema import EVENT_IDS_PER_ROW, MIGRATIONS, SCHEMA_VERSION
from jobcore_postgres.storage import PostgresStorage
from testenv import subprocess_env, wait_for

from jobcore import Config, Queue, Worker, make_plugin_manager

JOBCORE = [sys.executable, "-m", "jobcore"]


def _queue_on(storage: PostgresStorage) -> Queue:
    import jobcore_postgres

    pm = make_plugin_manager(load_entrypoints=False, plugins=(("postgres", jobcore_postgres),))
    return Queue(storage.target.display, config=Config(env={}), pm=pm, storage=storage)


def _rows(storage: Any) -> list[tuple[int, str, str | None, list[str] | None]]:
    """The events table as stored: (seq, kind, job_id, job_ids), in seq order."""
    with psycopg.connect(storage.target.conninfo, autocommit=True) as conn:
        return conn.execute(
            f"SELECT seq, kind, job_id, job_ids FROM {storage.schema}.events ORDER BY seq"
        ).fetchall()


def test_a_batch_is_one_row_read_as_one_event_per_job_each_with_its_own_id(
    queue: Queue,
) -> None:
    storage: Any = queue.storage
    single = queue.enqueue("noop", {}).job.id
    batch = [item.job.id for item in queue.enqueue_many("noop", [{}] * 5)]
    rows = _rows(storage)
    assert [(kind, job_id, ids) for _, kind, job_id, ids in rows] == [
        ("job:enqueued", single, None),
        ("job:enqueued", None, batch),
    ]
    events = storage.events_after(0, 100)
    assert [(e.kind, e.job_id) for e in events] == [("job:enqueued", j) for j in [single, *batch]]
    ids = [e.seq for e in events]
    assert len(set(ids)) == 6 and ids[1:] == list(range(rows[1][0], rows[1][0] + 5))
    assert all(e.data == {"type": "noop", "queue": "default"} for e in events)
    assert storage.last_event_seq() == ids[-1]
    # resuming from every event, inside the batch too, gives exactly the rest, in order
    for index, cursor in enumerate(ids):
        assert [e.seq for e in storage.events_after(cursor, 100)] == ids[index + 1 :]
        assert [e.seq for e in storage.events_after(cursor, 2)] == ids[index + 1 : index + 3]


def test_a_batch_larger_than_a_row_spans_rows_in_order_and_resumes_across_them(
    queue: Queue,
) -> None:
    storage: Any = queue.storage
    jobs = [item.job.id for item in queue.enqueue_many("noop", [{}] * 2500)]
    rows = _rows(storage)
    assert [len(ids) for _, _, _, ids in rows] == [EVENT_IDS_PER_ROW, EVENT_IDS_PER_ROW, 452]
    assert [j for _, _, _, ids in rows for j in ids] == jobs
    got: list[Any] = []
    cursor = 0
    while batch := storage.events_after(cursor, 700):  # pages that end inside rows
        got += batch
        cursor = batch[-1].seq
    assert [e.job_id for e in got] == jobs
    assert len({e.seq for e in got}) == 2500
    assert storage.last_event_seq() == got[-1].seq


def test_ids_between_a_rows_events_and_the_next_row_read_on_by_seq(queue: Queue) -> None:
    """A number no event has (between a short batch row and the next row) is a made-up
    cursor: it reads the events of rows with a greater seq."""
    storage: Any = queue.storage
    queue.enqueue_many("noop", [{}] * 3)
    later = queue.enqueue("noop", {}).job.id
    [first, *_] = _rows(storage)
    gap = first[0] + 10
    assert [e.job_id for e in storage.events_after(gap)] == [later]


def test_a_pruned_batch_cursor_reads_every_event_left(pg_storage_factory: Any) -> None:
    clock = [1_000_000]
    storage = pg_storage_factory(clock=lambda: clock[0], event_retention_ms=1000)
    queue = _queue_on(storage)
    old = [item.job.id for item in queue.enqueue_many("noop", [{}] * 4)]
    inside = storage.events_after(0, 100)[1].seq
    clock[0] += 10_000
    newer = [item.job.id for item in queue.enqueue_many("noop", [{}] * 2)]
    last = queue.enqueue("noop", {}).job.id
    storage.sweep()
    assert [job_id for _, _, job_id, _ in _rows(storage)] == [None, last]  # the old row pruned
    assert [e.job_id for e in storage.events_after(inside)] == [*newer, last]
    assert old  # (deleted with their row)


def _version_7_store(url: str, schema: str) -> None:
    """A store made by migrations 1-7, with what their code wrote: a job row and an
    event row per enqueued job, a claimed job with its claim event."""
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        for _, script in MIGRATIONS[:7]:
            conn.execute(script.format(s=schema).encode())
        conn.execute(f"UPDATE {schema}.schema_version SET version = 7")
        for n, status in enumerate(["pending", "pending", "claimed", "completed", "failed"]):
            conn.execute(
                f"INSERT INTO {schema}.jobs (id, type, payload, status, max_attempts, run_at, "
                "created_at, updated_at, locked_by) "
                "VALUES (%s, 'noop', '{}', %s, 3, 0, %s, %s, %s)",
                (f"old{n}", status, n, n, "w" if status == "claimed" else None),
            )
            conn.execute(
                f"INSERT INTO {schema}.events (at, kind, job_id) VALUES (%s, 'job:enqueued', %s)",
                (n, f"old{n}"),
            )


def test_a_version_7_store_with_jobs_and_events_migrates_and_reads_on(
    pg_database: str, pg_schema: str
) -> None:
    _version_7_store(pg_database, pg_schema)
    storage = PostgresStorage(f"{pg_database}?schema={pg_schema}")
    try:
        storage.migrate()
        queue = _queue_on(storage)
        old = storage.events_after(0, 100)
        assert [e.job_id for e in old] == [f"old{n}" for n in range(5)]
        assert [e.seq for e in old] == [1, 2, 3, 4, 5]
        batch = [item.job.id for item in queue.enqueue_many("noop", [{}] * 3)]
        single = queue.enqueue("noop", {}).job.id
        fresh = storage.events_after(old[2].seq, 100)  # a cursor handed out before
        assert [e.job_id for e in fresh] == ["old3", "old4", *batch, single]
        assert len({e.seq for e in old + fresh}) == 9
        assert all(e.seq > 5 for e in fresh[2:])
        assert storage.count_by_status() == {
            "pending": 6, "claimed": 1, "completed": 1, "failed": 1
        }  # fmt: skip
        assert [j.id for j in storage.list_jobs(statuses=["failed"])] == ["old4"]
        pending = sorted(["old0", "old1", *batch, single], reverse=True)  # newest first
        assert [j.id for j in storage.list_jobs(statuses=["pending"])] == pending
        with psycopg.connect(pg_database, autocommit=True) as conn:
            assert conn.execute(f"SELECT version FROM {pg_schema}.schema_version").fetchone() == (
                SCHEMA_VERSION,
            )
            (predicate,) = conn.execute(
                "SELECT pg_get_expr(indpred, indrelid) FROM pg_index "
                "WHERE indexrelid = %s::regclass",
                (f"{pg_schema}.jobs_status",),
            ).fetchone() or (None,)
        assert predicate == "(status <> 'pending'::text)"
    finally:
        storage.close()


# -- the hub's event stream ------------------------------------------------------------


class _Hub:
    def __init__(self, db: str, log: Path) -> None:
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [*JOBCORE, "--db", db, "serve", "--host", "127.0.0.1", "--port", "0"],
                env=subprocess_env(),
                stdout=out,
                stderr=out,
            )

        def announced() -> str | None:
            text = log.read_text(errors="replace")
            assert self.proc.poll() is None, text[-3000:]
            found = re.search(r"listening on (http://127\.0\.0\.1:\d+)", text)
            return found.group(1) if found else None

        self.url: str = wait_for(announced, timeout=60)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def hub(pg_url: str, tmp_path: Path) -> Iterator[_Hub]:
    started = _Hub(pg_url, tmp_path / "hub.log")
    yield started
    started.stop()


def _sse(url: str, token: str, last_event_id: int | None, count: int) -> list[tuple[int, str]]:
    """(id, job id) of the first `count` events of a stream (after `last_event_id`)."""
    import httpx

    got: list[tuple[int, str]] = []
    fields: dict[str, str] = {}
    headers = {"Authorization": f"Bearer {token}"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    with httpx.stream("GET", f"{url}/api/events", headers=headers, timeout=20) as answer:
        assert answer.status_code == 200, answer.read()
        for line in answer.iter_lines():
            if line == "" and "id" in fields:
                got.append((int(fields["id"]), json.loads(fields["data"])["id"]))
                if len(got) == count:
                    break
            if line == "":
                fields = {}
            elif not line.startswith(":"):
                name, _, value = line.partition(":")
                fields[name] = value.removeprefix(" ")
    return got


def _token(db: str) -> str:
    done = subprocess.run(
        [*JOBCORE, "--db", db, "tokens", "create", "--name", "reader", "--scope", "read"],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_hubs_stream_gives_each_job_of_a_batch_its_own_id_and_resumes_inside_it(
    pg_url: str, queue: Queue, hub: _Hub
) -> None:
    pytest.importorskip("jobcore_http", reason="the hub plugin (jobcore_http) is not here")
    token = _token(pg_url)
    before = queue.enqueue("noop", {}).job.id
    batch = [item.job.id for item in queue.enqueue_many("noop", [{}] * 6)]
    after = queue.enqueue("noop", {}).job.id
    expected = [before, *batch, after]
    # read from the store (a cursor the hub's ring does not hold)
    events = _sse(hub.url, token, 0, 8)
    assert [job for _, job in events] == expected
    ids = [seq for seq, _ in events]
    assert len(set(ids)) == 8
    for index in (1, 3, 6):  # the batch's first, a middle one, its last
        rest = _sse(hub.url, token, ids[index], 8 - index - 1)
        assert rest == events[index + 1 :]
    # live: a stream that is open while a batch commits gets it from the ring, and a
    # stream resuming inside that batch gets the rest exactly once
    live: list[list[tuple[int, str]]] = []
    reader = threading.Thread(target=lambda: live.append(_sse(hub.url, token, ids[-1], 4)))
    reader.start()
    time.sleep(1.0)  # connected by now, most likely (if not, it reads them from the store)
    more = [item.job.id for item in queue.enqueue_many("noop", [{}] * 4)]
    reader.join(30)
    assert [job for _, job in live[0]] == more
    inside = live[0][1][0]
    tail = _sse(hub.url, token, inside, 2)
    assert tail == live[0][2:]


def test_the_dashboards_counts_and_status_lists_see_batched_jobs_in_every_status(
    queue: Queue,
) -> None:
    """Pending rows are no longer in `jobs_status`: counts and lists by status stay right."""
    pytest.importorskip("jobcore_http", reason="the hub plugin (jobcore_http) is not here")
    from jobcore_http.dashboard.filters import JobFilter
    from jobcore_http.dashboard.overview import count
    from jobcore_http.dashboard.reader import Reader

    queue.enqueue_many("noop", [{"fail": True}] * 2, max_attempts=1)
    queue.enqueue_many("noop", [{}] * 3)
    queue.enqueue_many("noop", [{}] * 4, delay=3600)
    Worker(queue, concurrency=1, until_empty=True).run()
    pending = [item.job.id for item in queue.enqueue_many("noop", [{}] * 5, queue="mail")]
    reader = Reader(queue, queue.storage.hub_store())
    try:
        counts = count(reader)
        expected = {"failed": 2, "completed": 3, "scheduled": 4, "pending": 5}
        assert counts.totals == expected == queue.storage.count_by_status()
        assert counts.unfinished == {
            ("pending", "noop", "mail"): 5, ("scheduled", "noop", "default"): 4
        }  # fmt: skip
        for status, n in expected.items():
            assert reader.count(JobFilter(statuses=(status,))) == n
            listed = queue.list_jobs(statuses=[status])
            assert len(listed) == n and all(job.status == status for job in listed)
        assert [job.id for job in queue.list_jobs(statuses=["pending"])] == pending[::-1]
    finally:
        reader.close()
