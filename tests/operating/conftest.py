"""Fixtures of the operating tests (DESIGN §16): each test on SQLite and on PostgreSQL."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "http"))

from stores import _pg_hub_database, store_db  # noqa: F401  (fixtures: both stores)

from jobcore.queue import Queue
from jobcore.testing import make_queue


@pytest.fixture
def queue_on(store_db: Path | str) -> Iterator[Callable[..., Queue]]:  # noqa: F811
    """Factory of Queues (each its own connections) on this test's store, all closed after."""
    made: list[Queue] = []
    db = store_db

    def factory(**options: Any) -> Queue:
        modules = ["jobcore_postgres"] if isinstance(db, str) else []
        queue = make_queue(db, modules=modules, **options)
        queue.storage.migrate()
        made.append(queue)
        return queue

    yield factory
    for queue in made:
        queue.close()
