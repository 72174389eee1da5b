"""The hub's change waiter on SQLite looks for commits only while someone writes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from jobcore_http.waiter import PUSHED_CHECK, ChangeWaiter
from testenv import count_looks, enqueue_in_another_process, wait_for

from jobcore.storage import sqlite_writewatch
from jobcore.storage.sqlite import SQLiteStorage
from jobcore.storage.sqlite_writewatch import QUIET_S

pytestmark = pytest.mark.skipif(
    sqlite_writewatch.INotify is None, reason="inotify: Linux only (elsewhere the hub polls)"
)


def test_an_idle_hub_sleeps_and_hears_another_process_commit(tmp_path: Path) -> None:
    db = str(tmp_path / "hub.db")
    storage = SQLiteStorage(db)
    storage.migrate()
    looks = count_looks(storage)
    called: list[float] = []
    waiter = ChangeWaiter(storage, storage.wake_key)
    waiter.subscribe(lambda: called.append(time.monotonic()))
    waiter.start()
    try:
        time.sleep(QUIET_S + 0.5)
        before = len(looks)
        time.sleep(1.0)
        # every PUSHED_CHECK while nobody writes; polling would look every 3 ms (~330)
        assert len(looks) - before <= 1.0 / PUSHED_CHECK + 2
        assert called == []
        enqueue_in_another_process(db)
        wait_for(lambda: called, timeout=30)
    finally:
        waiter.stop()
        storage.close()
    assert not waiter._thread.is_alive()
