"""The SQLite store's write transaction (`SQLiteStorage._write`, under `transaction()`):
nested writes are savepoints, an exception rolls back only its own level and drops the
after-commit callbacks registered inside it, callbacks run once after the outer COMMIT
(a failing one is logged and the rest still run), and the next write starts afresh."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from jobcore import Queue


class Boom(Exception):
    pass


@pytest.fixture
def queue(tmp_path: Path) -> Queue:
    queue = Queue(str(tmp_path / "jobs.db"))
    queue.storage.migrate()
    return queue


def ids(queue: Queue) -> set[str]:
    return {job.id for job in queue.list_jobs(limit=1000)}


def test_inner_failure_rolls_back_its_savepoint_only(queue: Queue) -> None:
    storage = queue.storage
    ran: list[str] = []
    with storage.transaction():
        outer = queue.enqueue("noop", {}).job.id
        storage.after_commit(lambda: ran.append("outer"))
        with pytest.raises(Boom), storage.transaction():
            queue.enqueue("noop", {})
            storage.after_commit(lambda: ran.append("inner"))
            raise Boom
        kept = queue.enqueue("noop", {}).job.id
        with storage.transaction():  # a savepoint that succeeds: its callback waits
            storage.after_commit(lambda: ran.append("released"))
        assert ran == []  # nothing runs before the outer COMMIT
    assert ids(queue) == {outer, kept}
    # the enqueue wake-ups/hooks are callbacks too: the inner job's never ran
    assert ran == ["outer", "released"]


def test_outer_failure_rolls_back_everything_and_runs_nothing(queue: Queue) -> None:
    storage = queue.storage
    ran: list[str] = []
    with pytest.raises(Boom), storage.transaction():
        queue.enqueue("noop", {})
        storage.after_commit(lambda: ran.append("outer"))
        with storage.transaction():
            storage.after_commit(lambda: ran.append("inner"))
        raise Boom
    assert ids(queue) == set() and ran == []
    after = queue.enqueue("noop", {}).job.id  # depth restored: a write of its own commits
    storage.after_commit(lambda: ran.append("at once"))  # outside a transaction: runs now
    assert ids(queue) == {after} and ran == ["at once"]


def test_a_failing_callback_is_logged_and_the_rest_run(
    queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    storage = queue.storage
    ran: list[str] = []

    def fails() -> None:
        raise RuntimeError("callback broke")

    with caplog.at_level(logging.ERROR, logger="jobcore.storage"), storage.transaction():
        storage.after_commit(fails)
        storage.after_commit(lambda: ran.append("second"))
        job = queue.enqueue("noop", {}).job.id
    assert ran == ["second"] and ids(queue) == {job}
    assert any("after-commit callback failed" in r.getMessage() for r in caplog.records)
    with storage.transaction():  # the list was emptied: nothing runs twice
        pass
    assert ran == ["second"]
