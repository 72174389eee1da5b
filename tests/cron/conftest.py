"""Fixtures of the recurring-jobs tests (plugin `jobcore_cron`): both stores, a test clock."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "http"))

from stores import _pg_hub_database, store_db  # noqa: F401  (fixtures: both stores)

from jobcore import Queue, make_plugin_manager
from jobcore.testing import make_config


class Clock:
    """The store's clock, moved by the test (ms UTC)."""

    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> Clock:
    """A test clock at 2026-01-01T00:00:30Z."""
    return Clock(1_767_225_630_000)


@pytest.fixture
def clocked_queue(store_db: Path | str) -> Iterator[Callable[..., Queue]]:  # noqa: F811
    """Factory of Queues on this test's store whose storage reads `clock`."""
    made: list[Queue] = []

    def factory(clock: Clock, **options: Any) -> Queue:
        postgres = isinstance(store_db, str)
        if postgres:
            from jobcore_postgres.storage import PostgresStorage

            storage: Any = PostgresStorage(store_db, clock=clock)
        else:
            from jobcore.storage.sqlite import SQLiteStorage

            storage = SQLiteStorage(store_db, clock=clock)
        pm = make_plugin_manager(
            load_entrypoints=False,
            modules=["jobcore_cron", *(["jobcore_postgres"] if postgres else [])],
            only=(),
        )
        queue = Queue(str(store_db), config=make_config(**options), pm=pm, storage=storage)
        queue.storage.migrate()
        made.append(queue)
        return queue

    yield factory
    for queue in made:
        queue.close()
