"""An idle worker sleeps until the WAL file is written (`jobcore.storage.sqlite_writewatch`)."""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw
import jobcore_test_plugin as tp
import pytest
from testenv import count_looks, enqueue_in_another_process, open_fds_to, wait_for

from jobcore import JobStatus, Queue, Worker
from jobcore.storage import powers, sqlite_writewatch
from jobcore.storage.sqlite_writewatch import QUIET_S, WalWriteWatch

pytestmark = pytest.mark.skipif(
    sqlite_writewatch.INotify is None, reason="inotify: Linux only (elsewhere workers poll)"
)

MakeQueue = Callable[..., Queue]


def inotify_fds() -> int:
    """This process's inotify instances."""
    return open_fds_to("anon_inode:inotify")


def start_worker(queue: Queue, **options: Any) -> tuple[Worker, threading.Thread]:
    worker = Worker(queue, **options)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return worker, thread


def completed(queue: Queue) -> int:
    return queue.storage.count_by_status().get("completed", 0)


def test_an_idle_worker_stops_looking_for_commits_while_nobody_writes(
    jobcore_make_queue: MakeQueue,
) -> None:
    queue = jobcore_make_queue(tp, poll_interval=60.0)
    looks = count_looks(queue.storage)
    worker, thread = start_worker(queue)
    time.sleep(QUIET_S + 0.5)  # started, claimed nothing, quiet
    before = len(looks)
    time.sleep(1.5)
    # polling every wake_check_interval (3 ms) would look hundreds of times
    assert len(looks) - before <= 3
    worker.stop()
    thread.join(10)
    assert not thread.is_alive()


def test_a_commit_by_another_process_wakes_a_sleeping_worker(
    jobcore_make_queue: MakeQueue, jobcore_db: str
) -> None:
    # neither the poll nor the interval would look again within the test's patience
    queue = jobcore_make_queue(tp, poll_interval=120.0, wake_check_interval=120.0)
    worker, thread = start_worker(queue)
    time.sleep(QUIET_S + 0.5)
    for done in (1, 2):  # the second one meets a worker that ran a job and went quiet again
        enqueue_in_another_process(jobcore_db)
        wait_for(lambda: completed(queue) >= done, timeout=60)  # noqa: B023 - waited for here
        time.sleep(QUIET_S + 0.5)
    assert [job.status for job in queue.list_jobs()] == [JobStatus.COMPLETED] * 2
    worker.stop()
    thread.join(10)


def wal_database(db: str) -> apsw.Connection:
    conn = apsw.Connection(db)
    assert conn.execute("PRAGMA journal_mode=WAL").fetchall() == [("wal",)]
    conn.execute("CREATE TABLE t (x)")
    return conn


def sleeps(watch: powers.WriteWatch, cond: threading.Condition) -> bool:
    """Whether a waiter would now sleep until a write (as the worker asks: `cond` held)."""
    assert isinstance(watch, WalWriteWatch)
    with cond:
        watch.look_in(60.0, 0.003)
        return watch.sleeping


def notified(watch: powers.WriteWatch, cond: threading.Condition) -> bool:
    assert isinstance(watch, WalWriteWatch)
    with cond:
        return cond.wait_for(lambda: not watch.sleeping, timeout=10)


def test_the_watch_hears_a_wal_file_made_after_it_started(tmp_path: Path) -> None:
    db = str(tmp_path / "late.db")
    cond = threading.Condition()
    watch = WalWriteWatch.open(db, cond)
    assert isinstance(watch, WalWriteWatch)
    try:
        wait_for(lambda: sleeps(watch, cond), timeout=10)
        conn = wal_database(db)  # makes the -wal file
        assert notified(watch, cond)
        assert not sleeps(watch, cond)  # looking again
        wait_for(lambda: sleeps(watch, cond), timeout=10)
        conn.execute("INSERT INTO t VALUES (1)")  # a write to the file made after the start
        assert notified(watch, cond)
        conn.close()
    finally:
        watch.close()


def test_a_watch_that_breaks_goes_back_to_polling_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(sqlite_writewatch, "_watcher", None)  # a watcher of its own
    db = str(tmp_path / "broken.db")
    cond = threading.Condition()
    watch = WalWriteWatch.open(db, cond)  # no -wal file yet: the folder is watched
    assert isinstance(watch, WalWriteWatch) and watch._watcher is not None
    watcher = watch._watcher

    def no_watch_left(path: str, mask: int) -> int:  # past fs.inotify.max_user_watches
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(watcher._inotify, "add_watch", no_watch_left)
    wait_for(lambda: sleeps(watch, cond), timeout=10)
    with caplog.at_level(logging.WARNING, logger="jobcore.worker"):
        conn = wal_database(db)  # the -wal file is made; watching it fails
        assert notified(watch, cond)
    assert watcher.failed
    assert "looking for commits every wake_check_interval" in caplog.text
    assert "No space left on device" in caplog.text
    with cond:
        assert watch.look_in(60.0, 0.003) == 0.003  # polling, never sleeping
    watcher._thread.join(10)
    assert not watcher._thread.is_alive()
    conn.close()
    watch.close()
    assert inotify_fds() == 0  # the failed watcher's descriptors went with its last watch


def test_without_an_inotify_instance_the_worker_polls_and_says_why(
    jobcore_make_queue: MakeQueue,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def exhausted() -> None:  # what inotify_init1 says past fs.inotify.max_user_instances
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(sqlite_writewatch, "INotify", exhausted)
    monkeypatch.setattr(sqlite_writewatch, "_watcher", None)
    queue = jobcore_make_queue(tp, poll_interval=60.0)
    with caplog.at_level(logging.WARNING, logger="jobcore.worker"):
        watch = queue.storage.watch_writes(threading.Condition())  # type: ignore[attr-defined]
    assert isinstance(watch, powers.Polling)
    assert "max_user_instances" in caplog.text
    looks = count_looks(queue.storage)
    worker, thread = start_worker(queue)
    time.sleep(QUIET_S + 0.5)
    assert len(looks) > 20  # every wake_check_interval, as before the watch
    job = queue.enqueue("noop", {}).job
    wait_for(lambda: queue.get(job.id).status is JobStatus.COMPLETED, timeout=30)
    worker.stop()
    thread.join(10)


def test_a_store_that_cannot_be_opened_is_polled_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from jobcore.storage.sqlite import SQLiteStorage

    db = tmp_path / "spoilt.db"
    storage = SQLiteStorage(db)
    db.write_bytes(b"not a database at all, " * 100)  # spoilt under it
    watches: list[powers.WriteWatch] = []
    with caplog.at_level(logging.WARNING, logger="jobcore.storage"):
        # a thread of its own: its connection is opened now, and fails
        thread = threading.Thread(
            target=lambda: watches.append(storage.watch_writes(threading.Condition()))
        )
        thread.start()
        thread.join(30)
    assert len(watches) == 1 and isinstance(watches[0], powers.Polling)
    assert "cannot watch" in caplog.text and "not a SQLite database" in caplog.text
    storage.close()


SLOW_SYNC_WRITER = """
import sys, time, apsw

class SlowFile(apsw.VFSFile):
    def __init__(self, vfs, name, flags):
        super().__init__(vfs, name, flags)
        self.wal = str(name if isinstance(name, str) else name.filename()).endswith("-wal")

    def xSync(self, flags):
        if self.wal:
            time.sleep(float(sys.argv[2]))  # a disk that takes this long to sync
        return super().xSync(flags)

class SlowVFS(apsw.VFS):
    def __init__(self):
        super().__init__("slow-sync", "")

    def xOpen(self, name, flags):
        return SlowFile("", name, flags)

vfs = SlowVFS()
conn = apsw.Connection(sys.argv[1], vfs="slow-sync")
conn.execute("PRAGMA synchronous=FULL")
conn.execute("INSERT INTO t VALUES (2)")
print(time.monotonic(), flush=True)  # the commit is visible from here on
"""


def test_a_commit_whose_sync_outlasts_the_quiet_spell_is_still_seen(tmp_path: Path) -> None:
    db = str(tmp_path / "slow.db")
    conn = wal_database(db)
    conn.execute("INSERT INTO t VALUES (1)")
    cond = threading.Condition()
    watch = WalWriteWatch.open(db, cond)
    assert isinstance(watch, WalWriteWatch)
    try:
        wait_for(lambda: sleeps(watch, cond), timeout=10)
        sync_s = 2 * QUIET_S  # the frames are written, then the sync takes this long
        writer = subprocess.Popen(
            [sys.executable, "-c", SLOW_SYNC_WRITER, db, str(sync_s)],
            stdout=subprocess.PIPE,
            text=True,
        )
        count = 1
        deadline = time.monotonic() + 60  # a waiter that slept to its deadline: 60 s
        while count == 1 and time.monotonic() < deadline:  # the worker's waiting loop
            with cond:
                cond.wait(watch.look_in(deadline - time.monotonic(), 0.003))
            count = conn.execute("SELECT count(*) FROM t").fetchall()[0][0]
        seen = time.monotonic()
        out, _ = writer.communicate(timeout=30)
        visible = float(out.split()[0])
        assert count == 2
        # looks back off after the last write (half the time since), so a commit visible
        # 1 s after its write is seen within ~half a second of it, not at a deadline
        assert seen - visible < 10 * QUIET_S
    finally:
        watch.close()
        conn.close()


def test_one_inotify_instance_serves_every_watch_of_the_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_writewatch, "_watcher", None)
    before = inotify_fds()
    conns = [wal_database(str(tmp_path / f"db{i}.db")) for i in range(3)]
    watches = [
        WalWriteWatch.open(str(tmp_path / f"db{i % 3}.db"), threading.Condition())
        for i in range(6)  # two waiters on each of three databases
    ]
    assert all(isinstance(watch, WalWriteWatch) for watch in watches)
    assert inotify_fds() == before + 1
    for watch in watches:
        watch.close()
    assert inotify_fds() == before  # the last watch's close stops the watcher
    for conn in conns:
        conn.close()


def test_a_forked_child_keeps_no_inotify_instance_and_polls(tmp_path: Path) -> None:
    db = str(tmp_path / "forked.db")
    conn = wal_database(db)
    watch = WalWriteWatch.open(db, threading.Condition())
    assert isinstance(watch, WalWriteWatch)
    assert inotify_fds() >= 1
    with warnings.catch_warnings():  # Python 3.12+ warns of fork() beside threads
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: its copy of the watch cannot hear anything, so it polls
        code = 1
        try:
            if inotify_fds() == 0 and watch.look_in(60.0, 0.003) == 0.003:
                watch.close()
                code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    watch.close()
    conn.close()


def test_a_watcher_thread_that_cannot_start_leaves_polling_and_no_descriptor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(sqlite_writewatch, "_watcher", None)
    db = str(tmp_path / "nothread.db")
    conn = wal_database(db)
    fds = len(os.listdir("/proc/self/fd"))

    def refuse(self: threading.Thread) -> None:  # what pids.max or RLIMIT_NPROC says
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    with caplog.at_level(logging.WARNING, logger="jobcore.worker"):
        watch = WalWriteWatch.open(db, threading.Condition())
    monkeypatch.undo()
    assert isinstance(watch, powers.Polling)
    assert "can't start new thread" in caplog.text
    assert len(os.listdir("/proc/self/fd")) == fds
    conn.close()


def test_without_inotify_simple_on_linux_the_worker_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(sqlite_writewatch, "INotify", None)  # as if not installed
    monkeypatch.setattr(sqlite_writewatch, "_said_missing", False)
    with caplog.at_level(logging.WARNING, logger="jobcore.worker"):
        first = WalWriteWatch.open(str(tmp_path / "x.db"), threading.Condition())
        second = WalWriteWatch.open(str(tmp_path / "x.db"), threading.Condition())
    assert isinstance(first, powers.Polling) and isinstance(second, powers.Polling)
    assert caplog.text.count("inotify_simple is not installed") == 1  # once per process


def test_a_first_watch_that_cannot_be_had_leaves_no_watcher_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_writewatch, "_watcher", None)
    before = inotify_fds()
    watch = WalWriteWatch.open(str(tmp_path / "no-such-folder" / "x.db"), threading.Condition())
    assert isinstance(watch, powers.Polling)
    assert sqlite_writewatch._watcher is None
    assert inotify_fds() == before
    assert not [t for t in threading.enumerate() if t.name == "jobcore-walwatch"]


def test_a_busy_database_does_not_delay_a_sleeping_waiter_on_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_writewatch, "NAP_S", 5.0)  # a nap taken wrongly shows
    monkeypatch.setattr(sqlite_writewatch, "_watcher", None)
    quiet_conn, busy_conn = (
        wal_database(str(tmp_path / "x.db")),
        wal_database(str(tmp_path / "y.db")),
    )
    cond = threading.Condition()
    watch = WalWriteWatch.open(str(tmp_path / "x.db"), cond)
    busy = WalWriteWatch.open(str(tmp_path / "y.db"), threading.Condition())
    assert isinstance(watch, WalWriteWatch) and isinstance(busy, WalWriteWatch)
    try:
        # 1. x's waiter sleeps while y is written: no nap may keep x's write unread
        wait_for(lambda: sleeps(watch, cond), timeout=10)
        busy_conn.execute("INSERT INTO t VALUES (1)")
        time.sleep(0.1)
        quiet_conn.execute("INSERT INTO t VALUES (1)")
        started = time.monotonic()
        assert notified(watch, cond)
        assert time.monotonic() - started < 2.5
        # 2. y's write starts a nap while x's waiter still looks every interval; x then
        #    goes quiet and sleeps: that ends the nap, so x's next write is heard at once
        assert not sleeps(watch, cond)
        busy_conn.execute("INSERT INTO t VALUES (2)")
        wait_for(lambda: sleeps(watch, cond), timeout=10)
        quiet_conn.execute("INSERT INTO t VALUES (2)")
        started = time.monotonic()
        assert notified(watch, cond)
        assert time.monotonic() - started < 2.5
    finally:
        watch.close()
        busy.close()
        quiet_conn.close()
        busy_conn.close()
