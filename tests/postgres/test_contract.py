"""The PostgreSQL backend passes the storage conformance suite, unchanged."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from jobcore_postgres.storage import PostgresStorage

from jobcore.testing import StorageContract


class PgAppConnection:
    """The application's own psycopg connection, its tables in the test's schema."""

    def __init__(self, conninfo: str, schema: str) -> None:
        self.raw: psycopg.Connection[Any] = psycopg.connect(conninfo, autocommit=True)
        self.raw.execute(f"SET search_path TO {schema}")
        self.schema = schema

    def begin(self) -> None:
        """A transaction that holds back other writers of the jobs table (not readers)."""
        self.raw.execute("BEGIN")
        self.raw.execute(f"LOCK TABLE {self.schema}.jobs IN SHARE ROW EXCLUSIVE MODE")

    def execute(self, sql: str) -> None:
        self.raw.execute(sql.encode())

    def scalar(self, sql: str) -> Any:
        row = self.raw.execute(sql.encode()).fetchone()
        return None if row is None else row[0]

    def commit(self) -> None:
        self.raw.execute("COMMIT")

    def rollback(self) -> None:
        self.raw.execute("ROLLBACK")


class TestPostgresStorage(StorageContract):
    @pytest.fixture
    def storage_factory(
        self, pg_storage_factory: Callable[..., PostgresStorage]
    ) -> Callable[..., PostgresStorage]:
        return pg_storage_factory

    @pytest.fixture
    def app_connection(
        self, pg_storage_factory: Callable[..., PostgresStorage]
    ) -> Iterator[PgAppConnection]:
        store = pg_storage_factory()  # the schema exists from here on
        app = PgAppConnection(store.target.conninfo, store.schema)
        yield app
        app.raw.close()

    @pytest.fixture
    def busy_storage(self, pg_storage_factory: Callable[..., PostgresStorage]) -> PostgresStorage:
        return pg_storage_factory(lock_timeout_ms=200)


class TestPostgresStoragePollOnly(TestPostgresStorage):
    """The same rules behind a transaction-pooling proxy: no LISTEN, no session options."""

    @pytest.fixture
    def storage_factory(
        self, pg_storage_factory: Callable[..., PostgresStorage]
    ) -> Callable[..., PostgresStorage]:
        return lambda clock=None, **options: pg_storage_factory(clock, poll_only=True, **options)
