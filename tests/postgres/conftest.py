"""A PostgreSQL database of its own for this test run, and a fresh schema per test.

The server is `$JOBCORE_TEST_POSTGRES` (default: postgres on 127.0.0.1:5432,
trust auth). The tests skip, saying why, only when no server is reachable
(or psycopg is not installed); under `CI=true` that is a failure instead, so
CI cannot pass by skipping them.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Callable, Iterator
from typing import Any

import jobcore_test_plugin as tp
import pytest
from pg_testing import HOUR, temporary_database

from jobcore import Queue
from jobcore.testing import make_queue


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """URL of a database created for this run (dropped at the end)."""
    yield from temporary_database("jobcore_test")


_schemas = itertools.count(1)


@pytest.fixture
def pg_schema(pg_database: str) -> str:
    """A schema name no other test of this run uses."""
    return f"t{next(_schemas)}_{secrets.token_hex(2)}"


@pytest.fixture
def pg_url(pg_database: str, pg_schema: str) -> str:
    """`--db` URL of an empty store of its own (schema created on first use)."""
    return f"{pg_database}?schema={pg_schema}"


@pytest.fixture
def pg_storage_factory(pg_url: str) -> Iterator[Callable[..., Any]]:
    """Factory of `PostgresStorage` handles on the test's store; all closed at teardown."""
    from jobcore_postgres.storage import PostgresStorage

    made: list[PostgresStorage] = []

    def factory(clock: Callable[[], int] | None = None, **options: Any) -> PostgresStorage:
        storage = PostgresStorage(pg_url, clock=clock, **options)
        storage.migrate()
        made.append(storage)
        return storage

    yield factory
    for storage in made:
        storage.close()


@pytest.fixture
def queue(pg_url: str) -> Iterator[Queue]:
    """A Queue on this test's schema (migrated) with the PostgreSQL plugin."""
    import jobcore_postgres  # here, not above: without psycopg the tests skip, saying why

    queue = make_queue(pg_url, jobcore_postgres)
    queue.storage.migrate()
    yield queue
    queue.close()


@pytest.fixture
def idle_queue(pg_url: str) -> Iterator[Queue]:
    """`queue` with the test job types, whose workers poll and look for changes only
    hourly: what they do sooner, notifications (or in-process wake-ups) made them do."""
    import jobcore_postgres

    queue = make_queue(pg_url, jobcore_postgres, tp, poll_interval=HOUR, wake_check_interval=HOUR)
    queue.storage.migrate()
    yield queue
    queue.close()
