"""PostgreSQL event delivery under concurrent transactions (`jobcore_postgres.event_order`).

Readers follow the stream the way the hub does: keep the seq of the last
event delivered and ask `events_after(cursor)` again. Writers are real
concurrent transactions: threads with connections of their own, and another
process.
"""

from __future__ import annotations

import queue
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from jobcore_postgres.schema import MIGRATIONS
from jobcore_postgres.storage import PostgresStorage
from testenv import subprocess_env, wait_for

from jobcore.ids import new_id
from jobcore.models import Event, NewJob

Factory = Callable[..., PostgresStorage]


def new_job(**fields: Any) -> NewJob:
    values: dict[str, Any] = {
        "id": new_id(),
        "type": "noop",
        "queue": "default",
        "payload": {},
        "priority": 0,
        "max_attempts": 3,
        "run_at": 0,
        "timeout_ms": None,
        "idempotency_key": None,
    }
    values.update(fields)
    return NewJob(**values)


class Stream:
    """A reader that keeps a cursor, as an SSE stream does."""

    def __init__(self, storage: PostgresStorage) -> None:
        self.storage = storage
        self.cursor = storage.last_event_seq()
        self.got: list[Event] = []

    def read(self) -> list[Event]:
        new: list[Event] = []
        while batch := self.storage.events_after(self.cursor, 50):
            new += batch
            self.cursor = batch[-1].seq
        self.got += new
        return new


class Held:
    """A transaction on a thread (and connection) of its own: `do` runs a step in it,
    `end` commits or rolls it back."""

    def __init__(self, storage: PostgresStorage, *steps: Callable[[PostgresStorage], Any]) -> None:
        self.storage = storage
        self._steps: queue.Queue[Any] = queue.Queue()
        self._answers: queue.Queue[tuple[bool, Any]] = queue.Queue()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run)
        self.thread.start()
        for step in steps:
            self.do(step)

    def _run(self) -> None:
        try:
            with self.storage.transaction():
                while (step := self._steps.get()) is not _COMMIT:
                    if step is _ROLL_BACK:
                        raise _RolledBack
                    try:
                        self._answers.put((True, step(self.storage)))
                    except BaseException as exc:
                        self._answers.put((False, exc))
                        raise
        except _RolledBack:
            pass
        except BaseException as exc:  # reported by end()
            self.error = exc

    def do(self, step: Callable[[PostgresStorage], Any]) -> Any:
        self._steps.put(step)
        ok, value = self._answers.get(timeout=30)
        if not ok:
            raise value
        return value

    def end(self, *, roll_back: bool = False) -> None:
        self._steps.put(_ROLL_BACK if roll_back else _COMMIT)
        self.thread.join(30)
        assert not self.thread.is_alive() and self.error is None, self.error


_COMMIT, _ROLL_BACK = object(), object()


class _RolledBack(Exception):
    pass


def _take_xid(storage: PostgresStorage) -> None:
    """Give the open transaction an id without writing an event."""
    with storage._connection() as conn:
        conn.execute("SELECT pg_current_xact_id()")


def test_a_transaction_held_across_reads_loses_nothing(pg_storage_factory: Factory) -> None:
    reader = Stream(pg_storage_factory())
    slow = Held(pg_storage_factory(), lambda s: s.add_event("x:slow"))
    fast = pg_storage_factory()
    fast.add_event("x:fast")  # a greater seq, committed first
    assert reader.read() == []  # held back behind the open transaction, not skipped
    slow.end()
    assert [e.kind for e in reader.read()] == ["x:slow", "x:fast"]
    fast.add_event("x:after")
    assert [e.kind for e in reader.read()] == ["x:after"] and reader.read() == []


def test_delivery_order_is_not_seq_order_and_cursors_follow_it(
    pg_storage_factory: Factory,
) -> None:
    reader = Stream(pg_storage_factory())
    writer = pg_storage_factory()
    older = Held(pg_storage_factory(), _take_xid)  # the older transaction...
    b = writer.add_event("x:b")
    a = older.do(lambda s: s.add_event("x:a"))  # ...writes the greater seq
    assert a > b and reader.read() == []
    older.end()
    assert [(e.kind, e.seq) for e in reader.read()] == [("x:a", a), ("x:b", b)]
    assert [e.seq for e in writer.events_after(a)] == [b]  # after a: b, though b < a
    assert writer.events_after(b) == [] and writer.last_event_seq() == b


def test_the_hub_feed_finds_cursors_by_identity(pg_storage_factory: Factory) -> None:
    feed_module = pytest.importorskip("jobcore_http.events")
    store_module = pytest.importorskip("jobcore_http.store")
    storage = pg_storage_factory()
    feed = feed_module.EventFeed(storage, store_module.hub_store_for(storage))
    start = feed.join()
    writer = pg_storage_factory()
    older = Held(pg_storage_factory(), _take_xid)
    b = writer.add_event("x:b")
    a = older.do(lambda s: s.add_event("x:a"))
    feed.changed()
    assert feed.recent(start) == []  # nothing deliverable yet
    older.end()
    feed.changed()
    assert [e.seq for e in feed.recent(start) or []] == [a, b]
    assert [e.seq for e in feed.recent(a) or []] == [b]  # a stream that got a still gets b
    assert feed.recent(b) == []
    assert feed.recent(10**9) is None  # not in the ring: the stream reads the store


def test_a_rolled_back_transaction_never_blocks_the_stream(pg_storage_factory: Factory) -> None:
    reader = Stream(pg_storage_factory())
    doomed = Held(pg_storage_factory(), lambda s: s.insert([new_job()]))
    writer = pg_storage_factory()
    kept = writer.insert([new_job()])[0].job.id
    assert reader.read() == []
    doomed.end(roll_back=True)
    assert [(e.kind, e.job_id) for e in reader.read()] == [("job:enqueued", kept)]
    writer.add_event("x:next")
    assert [e.kind for e in reader.read()] == ["x:next"]


def test_a_transaction_of_another_database_holds_nothing_back(
    pg_storage_factory: Factory, pg_database: str
) -> None:
    reader = Stream(pg_storage_factory())
    writer = pg_storage_factory()
    server = pg_database.rsplit("/", 1)[0]
    other = f"{pg_database.rsplit('/', 1)[1]}_other"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {other}")
    try:
        with psycopg.connect(f"{server}/{other}") as elsewhere:
            elsewhere.execute("SELECT pg_current_xact_id()")  # an open transaction with an id
            writer.add_event("x:here")
            assert [e.kind for e in reader.read()] == ["x:here"]
            # one of this database holds back, even with no event of its own
            with psycopg.connect(pg_database) as here:
                here.execute("SELECT pg_current_xact_id()")
                writer.add_event("x:held")
                assert reader.read() == []
            assert [e.kind for e in reader.read()] == ["x:held"]
    finally:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {other} WITH (FORCE)")


def test_a_reader_in_its_own_transaction_is_not_handed_its_uncommitted_events(
    pg_storage_factory: Factory,
) -> None:
    storage = pg_storage_factory()
    start = storage.last_event_seq()
    with storage.transaction():
        storage.add_event("x:mine")
        assert storage.events_after(start) == []
        assert storage.last_event_seq() == start
    assert [e.kind for e in storage.events_after(start)] == ["x:mine"]


def test_a_transaction_in_another_process_held_across_reads(
    pg_storage_factory: Factory, pg_url: str
) -> None:
    reader = Stream(pg_storage_factory())
    writer = pg_storage_factory()
    script = (
        "import sys\n"
        "from jobcore_postgres.storage import PostgresStorage\n"
        "s = PostgresStorage(sys.argv[1])\n"
        "with s.transaction():\n"
        "    s.add_event('x:other-process')\n"
        "    print('inserted', flush=True)\n"
        "    assert sys.stdin.readline().strip() == 'commit'\n"
        "s.close()\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", script, pg_url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=subprocess_env(),
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None and proc.stdin is not None
            assert proc.stdout.readline().strip() == "inserted"
            for n in range(3):
                writer.add_event(f"x:here-{n}")
                assert reader.read() == []
            proc.stdin.write("commit\n")
            proc.stdin.flush()
            assert proc.wait(30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
    assert [e.kind for e in reader.read()] == [
        "x:other-process",
        "x:here-0",
        "x:here-1",
        "x:here-2",
    ]


def test_many_writers_and_rollbacks_against_a_following_reader(pg_storage_factory: Factory) -> None:
    """Threads commit or roll back jobs at random while a reader follows: it ends with
    exactly the committed events, each once."""
    reader = Stream(pg_storage_factory())
    committed: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        storage = pg_storage_factory()
        try:
            for _ in range(15):
                job = new_job()
                try:
                    with storage.transaction():
                        storage.insert([job])
                        time.sleep(rng.random() * 0.02)
                        if rng.random() < 0.25:
                            raise _RolledBack
                except _RolledBack:
                    continue
                with lock:
                    committed.append(job.id)
        except BaseException as exc:
            errors.append(exc)

    def follow() -> None:
        while not stop.is_set():
            reader.read()
            time.sleep(0.002)

    following = threading.Thread(target=follow)
    following.start()
    writers = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join(60)
    stop.set()
    following.join(30)
    reader.read()
    assert not errors, errors
    delivered = Counter(e.job_id for e in reader.got)
    assert set(delivered) == set(committed) and set(delivered.values()) == {1}


# -- change detection, pruning and upgrade ---------------------------------------------


def test_polling_sees_a_smaller_seq_committed_late(pg_storage_factory: Factory) -> None:
    waiter = pg_storage_factory(poll_only=True)
    slow = Held(pg_storage_factory(), lambda s: s.add_event("x:slow"))
    waiter.get("warm-up")
    pg_storage_factory().add_event("x:fast")
    assert waiter.wait_for_change(5.0) is True
    assert waiter.wait_for_change(0) is False
    slow.end()  # max(seq) does not move: the fast event's seq is the greater
    assert waiter.wait_for_change(5.0) is True
    assert waiter.wait_for_change(0) is False


def test_a_first_wait_sees_a_smaller_seq_committed_before_listening(
    pg_storage_factory: Factory,
) -> None:
    waiter = pg_storage_factory()
    slow = Held(pg_storage_factory(), lambda s: s.add_event("x:slow"))
    pg_storage_factory().add_event("x:fast")
    waiter.get("warm-up")  # first use: the fast event is the newest committed
    slow.end()  # before this thread listens
    assert waiter.wait_for_change(0) is True


def test_the_sweep_keeps_held_back_and_newest_events(pg_storage_factory: Factory) -> None:
    now = [1_000_000_000_000]
    hour = 3_600_000
    reader = Stream(pg_storage_factory(clock=lambda: now[0]))
    writer = pg_storage_factory(clock=lambda: now[0])
    writer.add_event("x:old")
    held = Held(pg_storage_factory(clock=lambda: now[0]), _take_xid)
    writer.add_event("x:held")
    now[0] += 2 * hour
    writer.sweep(force=True)
    assert [e.kind for e in writer.events_after(0)] == ["x:old"]  # the newest deliverable stays
    held.end()
    assert [e.kind for e in reader.read()] == ["x:old", "x:held"]


def test_a_store_from_before_the_xid_column_upgrades_in_place_and_keeps_its_order(
    pg_database: str, pg_schema: str
) -> None:
    before = [name for name, _ in MIGRATIONS].index("events in commit-safe order")
    with psycopg.connect(pg_database, autocommit=True) as conn, conn.transaction():
        for _, script in MIGRATIONS[:before]:
            conn.execute(script.format(s=pg_schema).encode())
        conn.execute(f"UPDATE {pg_schema}.schema_version SET version = %s", (before,))
        for n in range(3):
            conn.execute(
                f"INSERT INTO {pg_schema}.events (at, kind) VALUES (0, %s)", (f"x:old-{n}",)
            )
    storage = PostgresStorage(f"{pg_database}?schema={pg_schema}")
    try:
        storage.migrate()
        old = storage.events_after(0)
        assert [e.kind for e in old] == ["x:old-0", "x:old-1", "x:old-2"]
        storage.add_event("x:new")
        assert [e.kind for e in storage.events_after(old[1].seq)] == ["x:old-2", "x:new"]
        assert storage.events_after(storage.last_event_seq()) == []
    finally:
        storage.close()


def test_the_hub_delivers_an_event_freed_by_a_transaction_that_wrote_none(
    pg_storage_factory: Factory,
) -> None:
    """That transaction's end notifies nobody: the feed's periodic re-read delivers it."""
    feed_module = pytest.importorskip("jobcore_http.events")
    store_module = pytest.importorskip("jobcore_http.store")
    waiter_module = pytest.importorskip("jobcore_http.waiter")
    storage = pg_storage_factory()
    feed = feed_module.EventFeed(storage, store_module.hub_store_for(storage))
    waiter = waiter_module.ChangeWaiter(storage, storage.wake_key)
    waiter.subscribe(feed.changed, every=0.1)
    feed.join()
    waiter.start()
    try:
        blocker = Held(pg_storage_factory(), _take_xid)
        seq = pg_storage_factory().add_event("x:held")
        time.sleep(0.5)  # notified and read: held back
        assert feed.latest != seq
        blocker.end()
        wait_for(lambda: feed.latest == seq, timeout=10)
    finally:
        waiter.stop()
