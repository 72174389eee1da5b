"""Fixtures of the operating tests (DESIGN §16): each test on SQLite and on PostgreSQL."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "http"))

from hubproc import Hub, Tokens, make_tokens
from stores import _pg_hub_database, store_db  # noqa: F401  (fixtures: both stores)

from jobcore import operating
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


@pytest.fixture
def queue(store_db: Path | str, request: pytest.FixtureRequest) -> Iterator[Queue]:  # noqa: F811
    """A Queue on this test's store with the test module's `PLUGIN` (a tests/helpers module
    of job types) loaded, and the limits of its `DECLARED` types written (as a worker's
    start writes them; none when the module has no `DECLARED`)."""
    modules = [request.module.PLUGIN]
    if isinstance(store_db, str):
        modules.append("jobcore_postgres")
    made = make_queue(store_db, modules=modules)
    made.storage.migrate()
    declared = getattr(request.module, "DECLARED", ())
    if declared:
        operating.declare_types(made, declared)
    yield made
    made.close()


@pytest.fixture
def served(store_db: Path | str, tmp_path: Path) -> Iterator[tuple[Hub, Tokens]]:  # noqa: F811
    """A `jobcore serve` (lease 30 s) on this test's store, and a token of each scope."""
    hub = Hub(store_db, "--lease", "30s", logs=tmp_path)
    try:
        yield hub, make_tokens(hub, store_db)
    finally:
        assert hub.terminate() == 0, hub.output()[-3000:]
