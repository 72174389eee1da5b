"""pytest plugin (entry point `pytest11: jobcore`): fixtures for jobcore and its plugins."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jobcore.queue import Queue
from jobcore.testing.helpers import make_queue
from jobcore.testing.recorder import HookRecorder


@pytest.fixture
def jobcore_db(tmp_path: Path) -> str:
    """Path of a fresh SQLite database file under tmp_path."""
    return str(tmp_path / "jobs.db")


@pytest.fixture
def jobcore_recorder() -> HookRecorder:
    """A HookRecorder; `jobcore_queue` registers it."""
    return HookRecorder()


@pytest.fixture
def jobcore_make_queue(jobcore_db: str) -> Iterator[Callable[..., Queue]]:
    """Factory: `jobcore_make_queue(*plugins, **settings)` on the test's database."""
    made: list[Queue] = []

    def factory(*plugins: Any, db: str | None = None, **options: Any) -> Queue:
        queue = make_queue(db or jobcore_db, *plugins, **options)
        made.append(queue)
        return queue

    yield factory
    for queue in made:
        queue.close()


@pytest.fixture
def jobcore_queue(
    jobcore_make_queue: Callable[..., Queue], jobcore_recorder: HookRecorder
) -> Queue:
    """A Queue with only the built-in plugins and the recorder, with fast retries."""
    return jobcore_make_queue(jobcore_recorder)
