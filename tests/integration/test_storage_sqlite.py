"""SQLite-specific storage behaviour: driver errors, poison outcomes, crashes, races, outbox."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import apsw
import pytest

from jobcore import Queue
from jobcore.errors import (
    NotADatabase,
    PermanentStorageError,
    StorageBusy,
    StorageConnectionLost,
    StorageError,
    StorageFull,
    StorageIOError,
    StorageReadOnly,
    StorageUnavailable,
    TransientStorageError,
)
from jobcore.models import Completed, Failed, JobStatus, Lease, Retrying
from jobcore.storage.sqlite import SQLiteStorage
from jobcore.storage.sqlite_errors import MAX_ERROR_CHARS, storage_error
from jobcore.testing import HookRecorder
from jobcore.testing.contract import LEASE, T0, FakeClock, new_job


@pytest.fixture
def storage(tmp_path: Path) -> SQLiteStorage:
    storage = SQLiteStorage(tmp_path / "jobs.db", clock=FakeClock())
    storage.migrate()
    return storage


# -- driver errors become StorageError classes ------------------------------------------


@pytest.mark.parametrize(
    ("driver", "ours", "transient"),
    [
        (apsw.BusyError, StorageBusy, True),
        (apsw.LockedError, StorageBusy, True),
        (apsw.IOError, StorageIOError, True),
        (apsw.ConnectionClosedError, StorageConnectionLost, True),
        (apsw.FullError, StorageFull, False),
        (apsw.NotADBError, NotADatabase, False),
        (apsw.CorruptError, NotADatabase, False),
        (apsw.ReadOnlyError, StorageReadOnly, False),
        (apsw.PermissionsError, StorageReadOnly, False),
        (apsw.CantOpenError, StorageUnavailable, False),
    ],
)
def test_each_driver_error_has_its_class(
    driver: type[apsw.Error], ours: type[StorageError], transient: bool
) -> None:
    error = storage_error(driver("details"), "/x/jobs.db", 30_000)
    assert type(error) is ours
    assert isinstance(error, TransientStorageError if transient else PermanentStorageError)
    assert "/x/jobs.db" in str(error) and "details" in str(error)


def test_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    junk = tmp_path / "notes.db"
    junk.write_text("hello, this is not SQLite at all")
    with pytest.raises(NotADatabase, match="not a SQLite database"):
        SQLiteStorage(junk)
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    storage = SQLiteStorage(corrupt)
    with pytest.raises(NotADatabase, match=r"not a SQLite database|corrupt"):
        storage.count_by_status()
    storage.close()


def test_a_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(StorageUnavailable, match="does not exist"):
        SQLiteStorage(tmp_path / "nowhere" / "jobs.db")


def test_disk_full_is_storage_full_and_the_store_recovers(storage: SQLiteStorage) -> None:
    conn = storage._conn()
    pages = conn.execute("PRAGMA page_count").fetchall()[0][0]
    conn.execute(f"PRAGMA max_page_count={pages + 2}")  # a "disk" two pages from full
    big = {"blob": "x" * 20_000}
    with pytest.raises(StorageFull, match="is full"):
        storage.insert([new_job(payload=big) for _ in range(20)])
    assert storage.count_by_status() == {}  # nothing half-written
    conn.execute("PRAGMA max_page_count=1073741823")
    storage.insert([new_job(payload=big)])
    assert storage.count_by_status() == {"pending": 1}


def test_a_held_write_lock_is_storage_busy_not_a_driver_error(storage: SQLiteStorage) -> None:
    quick = SQLiteStorage(storage.path, busy_timeout=0.05)
    quick.get("warm-up")
    holder = apsw.Connection(storage.path)
    holder.execute("BEGIN IMMEDIATE")
    try:
        for write in (
            lambda: quick.insert([new_job()]),
            lambda: quick.claim(worker="w", limit=1, lease_ms=LEASE),
            lambda: quick.sweep(force=True),
            lambda: quick.add_event("worker:lost"),
        ):
            with pytest.raises(StorageBusy, match="busy_timeout"):
                write()
        assert quick.list_jobs() == []  # reads still work
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    quick.close()


# -- one bad outcome never blocks the batch ----------------------------------------------


def test_unrecordable_outcomes_fail_their_job_alone(storage: SQLiteStorage) -> None:
    storage.insert([new_job() for _ in range(5)])
    existing = new_job()
    storage.insert([existing])
    jobs = storage.claim(worker="w", limit=5, lease_ms=LEASE, types=["noop"])
    jobs = [j for j in jobs if j.id != existing.id][:4]
    leases = [Lease.of(j) for j in jobs]
    outcomes = [
        Completed(leases[0], {"not json": object()}),
        Completed(leases[1], None, (new_job(id=existing.id),)),  # child id taken: constraint
        Retrying(leases[2], "bad \udcff surrogate and " + "x" * 50_000, 10**40),
        Completed(leases[3], "fine"),
    ]
    answers = storage.record(outcomes)
    assert [a.state for a in answers] == ["recorded"] * 4
    assert [a.job.status for a in answers if a.job] == [
        JobStatus.FAILED,
        JobStatus.FAILED,
        JobStatus.SCHEDULED,
        JobStatus.COMPLETED,
    ]
    assert "could not record outcome" in (answers[0].job.last_error or "")  # type: ignore[union-attr]
    stored = storage.get(jobs[2].id)
    assert stored is not None and stored.last_error is not None
    assert len(stored.last_error) <= MAX_ERROR_CHARS and "surrogate" in stored.last_error
    assert stored == answers[2].job
    assert storage.get(jobs[1].id) == answers[1].job


def test_a_process_killed_inside_a_transaction_leaves_nothing(tmp_path: Path) -> None:
    path = tmp_path / "killed.db"
    SQLiteStorage(path).migrate()
    script = (
        "import os, sys\n"
        "from jobcore.storage.sqlite import SQLiteStorage\n"
        "from jobcore.testing.contract import new_job\n"
        "s = SQLiteStorage(sys.argv[1])\n"
        "with s.transaction():\n"
        "    s.insert([new_job(id='doomed')])\n"
        "    s.claim(worker='w', limit=1, lease_ms=1000)\n"
        "    os._exit(9)\n"
    )
    result = subprocess.run([sys.executable, "-c", script, str(path)], timeout=60)
    assert result.returncode == 9
    storage = SQLiteStorage(path)
    assert storage.get("doomed") is None and storage.events_after(0) == []
    storage.insert([new_job()])  # the write lock was not left behind
    storage.close()


# -- races between connections ------------------------------------------------------------


def test_racing_sweepers_sweep_each_job_once(tmp_path: Path) -> None:
    clock = FakeClock()
    handles = [SQLiteStorage(tmp_path / "race.db", clock=clock) for _ in range(4)]
    handles[0].insert([new_job() for _ in range(40)])
    handles[0].claim(worker="dead", limit=40, lease_ms=LEASE)
    clock.now = T0 + LEASE + 1
    swept: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(len(handles))

    def sweep(storage: SQLiteStorage) -> None:
        barrier.wait()
        for item in storage.sweep():
            with lock:
                swept.append(item.job.id)

    threads = [threading.Thread(target=sweep, args=(h,)) for h in handles]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(swept) == 40 and len(set(swept)) == 40
    reclaims = [e for e in handles[0].events_after(0, 1000) if e.kind == "job:reclaimed"]
    assert len(reclaims) == 40
    for handle in handles:
        handle.close()


def test_a_late_report_after_reclaim_and_reclaim_by_the_same_worker_is_stale(
    storage: SQLiteStorage,
) -> None:
    clock = storage._clock
    assert isinstance(clock, FakeClock)
    storage.insert([new_job()])
    [first] = storage.claim(worker="same-host:1", limit=1, lease_ms=LEASE)
    clock.now += LEASE + 1
    storage.sweep(force=True)
    [second] = storage.claim(worker="same-host:1", limit=1, lease_ms=LEASE)
    assert second.attempts == 2 and second.locked_by == first.locked_by
    [late] = storage.record([Failed(Lease.of(first), "late")])
    assert (late.state, late.job) == ("stale", None)
    assert storage.extend_leases([Lease.of(first)], lease_ms=LEASE) == {}
    [current] = storage.record([Completed(Lease.of(second), "ok")])
    assert current.state == "recorded"


# -- the outbox on the application's own connection --------------------------------------


def test_outbox_refuses_a_connection_to_another_file_or_no_connection(
    storage: SQLiteStorage, tmp_path: Path
) -> None:
    other = apsw.Connection(str(tmp_path / "other.db"))
    other.execute("BEGIN")
    with pytest.raises(StorageError, match="not to this queue's database"):
        storage.insert([new_job()], conn=other)
    other.execute("ROLLBACK")
    other.close()
    with pytest.raises(StorageError, match=r"apsw\.Connection"):
        storage.insert([new_job()], conn="not a connection")


def test_queue_enqueue_on_the_applications_connection(tmp_path: Path) -> None:
    from jobcore.testing import make_queue

    recorder = HookRecorder()
    path = tmp_path / "app.db"
    queue: Queue = make_queue(path, recorder)
    queue.storage.migrate()
    app = apsw.Connection(str(path))
    app.execute("CREATE TABLE orders (id TEXT PRIMARY KEY, job_id TEXT)")
    app.execute("BEGIN IMMEDIATE")
    job = queue.enqueue("noop", {}, conn=app).job
    app.execute("INSERT INTO orders VALUES ('o1', ?)", (job.id,))
    assert recorder.of("job_enqueued") == []  # not before the application commits
    app.execute("COMMIT")
    assert [call.job.id for call in recorder.of("job_enqueued")] == [job.id]  # type: ignore[union-attr]
    assert queue.get(job.id).status is JobStatus.PENDING
    app.execute("BEGIN IMMEDIATE")
    dropped = queue.enqueue_many("noop", [{}, {}], conn=app)
    app.execute("ROLLBACK")
    assert all(queue.storage.get(item.job.id) is None for item in dropped)
    assert len(recorder.of("job_enqueued")) == 1
    app.close()
    queue.close()


def test_a_damaged_row_fails_alone_and_stays_readable(storage: SQLiteStorage) -> None:
    storage.insert([new_job(), new_job()])
    damaged, fine = storage.claim(worker="w", limit=2, lease_ms=LEASE)
    with storage.transaction() as conn:  # e.g. a bad manual edit
        conn.execute(
            "UPDATE jobs SET errors = 'not json', history = '{oops' WHERE id = ?", (damaged.id,)
        )
    answers = storage.record(
        [Retrying(Lease.of(damaged), "boom", 0), Completed(Lease.of(fine), "ok")]
    )
    assert [a.state for a in answers] == ["recorded", "recorded"]
    assert answers[0].job is not None and answers[0].job.status is JobStatus.FAILED
    assert "could not record outcome" in (answers[0].job.last_error or "")
    assert answers[1].job is not None and answers[1].job.status is JobStatus.COMPLETED
    shown = storage.get(damaged.id)
    assert shown is not None and shown.errors == [{"corrupt": "not json"}]
    assert [e.kind for e in storage.events_after(0) if e.job_id == damaged.id][-1] == "job:failed"


def test_cli_reads_work_while_another_process_holds_the_write_lock(tmp_path: Path) -> None:
    """Issue 8 defect 15: list, show and stats beside a writer; a write says busy in one line."""
    from click.testing import CliRunner

    from jobcore.cli import cli

    path = tmp_path / "busy.db"
    storage = SQLiteStorage(path)
    [job] = storage.insert([new_job()])
    storage.close()
    env = {"JOBCORE_DB": str(path), "JOBCORE_BUSY_TIMEOUT": "0.2"}
    holder = apsw.Connection(str(path))
    holder.execute("BEGIN IMMEDIATE")
    try:
        runner = CliRunner()
        for args in (["list", "--json"], ["show", job.job.id, "--json"], ["stats", "--json"]):
            result = runner.invoke(cli, args, env=env, catch_exceptions=False)
            assert result.exit_code == 0, (args, result.output)
        result = runner.invoke(cli, ["cancel", job.job.id], env=env, catch_exceptions=False)
        assert result.exit_code == 1
        assert "busy" in result.output and "Traceback" not in result.output
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_event_pruning_catches_up_in_chunks(tmp_path: Path) -> None:
    from jobcore.storage import sqlite as backend

    clock = FakeClock()
    storage = SQLiteStorage(tmp_path / "events.db", clock=clock, synchronous="OFF")
    storage.migrate()
    with storage.transaction() as conn:  # 50k old events at once (3 chunks' worth)
        conn.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 50000) "
            "INSERT INTO events (at, kind, job_id) SELECT ?, 'job:enqueued', 'x' || i FROM n",
            (T0,),
        )
    last = storage.last_event_seq()
    clock.now = T0 + 2 * 3_600_000
    storage.insert([new_job(run_at=None)])
    changes: list[int] = []
    conn = storage._conn()
    conn.set_update_hook(
        lambda op, db, table, rowid: changes.append(op) if table == "events" else None
    )
    storage.sweep(force=True)
    conn.set_update_hook(None)
    remaining = storage.events_after(0)
    assert [e.kind for e in remaining] == ["job:enqueued"] and remaining[0].seq > last
    assert len(changes) >= 50_000 > backend.PRUNE_CHUNK
    storage.close()


def test_event_data_that_is_not_json_is_refused(storage: SQLiteStorage) -> None:
    with pytest.raises(StorageError, match="JSON"):
        storage.add_event("worker:registered", data={"when": object()})
    assert storage.events_after(0) == []


def test_a_finished_threads_connection_is_closed(storage: SQLiteStorage) -> None:
    import gc

    def use() -> None:
        storage.get("x")

    for _ in range(40):
        thread = threading.Thread(target=use)
        thread.start()
        thread.join()
    gc.collect()
    assert len(storage._all) <= 2  # this thread's, maybe one not collected yet
    storage.insert([new_job()])
    assert storage.count_by_status() == {"pending": 1}


def test_passing_the_transactions_own_connection_is_the_usual_path(tmp_path: Path) -> None:
    from jobcore.testing import make_queue

    recorder = HookRecorder()
    queue = make_queue(tmp_path / "own.db", recorder)
    with queue.transaction() as db:
        job = queue.enqueue("noop", {}, conn=db).job
        assert recorder.of("job_enqueued") == []
    assert [call.job.id for call in recorder.of("job_enqueued")] == [job.id]  # type: ignore[union-attr]
    with pytest.raises(RuntimeError), queue.transaction() as db:
        dropped = queue.enqueue("noop", {}, conn=db).job
        raise RuntimeError
    assert queue.storage.get(dropped.id) is None and len(recorder.of("job_enqueued")) == 1
    queue.close()


def test_event_retention_is_a_setting(tmp_path: Path) -> None:
    from jobcore.testing import make_queue

    queue = make_queue(tmp_path / "retention.db", event_retention="90s")
    storage = queue.storage
    assert isinstance(storage, SQLiteStorage) and storage.event_retention_ms == 90_000
    queue.close()
