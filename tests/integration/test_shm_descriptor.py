"""The -shm file's descriptor never drops SQLite's locks (`jobcore.storage.sqlite_walindex`).

SQLite locks -shm with POSIX record locks, which belong to the process: closing any
descriptor of the file drops them all, and another process may then write while one
of ours is mid-transaction.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
from pathlib import Path

from testenv import open_fds_to

from jobcore.storage.sqlite import SQLiteStorage

PROBE = """
import sys, apsw
conn = apsw.Connection(sys.argv[1])
conn.set_busy_timeout(0)
try:
    conn.execute("BEGIN IMMEDIATE")
    print("got the write lock")
except apsw.BusyError:
    print("busy")
"""


def write_lock_free(db: Path) -> bool:
    """Whether another process can begin writing now."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(db)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip() == "got the write lock"


def look_from_a_thread_that_ends(storage: SQLiteStorage) -> None:
    thread = threading.Thread(
        target=lambda: [storage.wait_for_change(0) for _ in range(3)]  # reads -shm
    )
    thread.start()
    thread.join(30)
    gc.collect()  # the thread's connection and state are gone


def test_a_thread_that_looked_for_changes_and_ended_leaves_our_locks_held(
    tmp_path: Path,
) -> None:
    db = tmp_path / "locks.db"
    writer, looker = SQLiteStorage(db), SQLiteStorage(db)
    writer.migrate()
    try:
        with writer.transaction():  # this process holds the write lock
            assert not write_lock_free(db)
            look_from_a_thread_that_ends(looker)
            assert not write_lock_free(db)  # still ours
            looker.close()  # another storage of this process still has the file open
            assert not write_lock_free(db)
        assert write_lock_free(db)
    finally:
        writer.close()
        looker.close()


def test_the_last_storage_to_close_closes_the_descriptor(tmp_path: Path) -> None:
    db = tmp_path / "last.db"
    storage = SQLiteStorage(db)
    storage.migrate()
    look_from_a_thread_that_ends(storage)
    shm = str(db) + "-shm"

    assert open_fds_to(shm) >= 1
    storage.close()
    gc.collect()
    assert open_fds_to(shm) == 0


def test_an_adopted_application_connection_keeps_its_locks_after_the_queue_closes(
    tmp_path: Path,
) -> None:
    import apsw
    import jobcore_test_plugin as tp

    from jobcore.testing.helpers import make_queue

    db = tmp_path / "app.db"
    queue = make_queue(str(db), tp)
    queue.storage.migrate()
    app = apsw.Connection(str(db))  # the application's own, on the same file
    app.execute("BEGIN IMMEDIATE")
    queue.enqueue("noop", {}, conn=app)  # joins the application's transaction
    look_from_a_thread_that_ends(queue.storage)  # the -shm descriptor is open
    queue.close()  # the last storage of this process on the file
    gc.collect()
    assert not write_lock_free(db)  # the application's transaction still holds it
    app.execute("COMMIT")
    assert write_lock_free(db)
    app.close()
