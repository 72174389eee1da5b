"""The SQLite backend passes the storage conformance suite."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest

from jobcore.storage.sqlite import SQLiteStorage
from jobcore.testing import StorageContract


class SQLiteAppConnection:
    """The application's own APSW connection to the jobs database (outbox, write lock)."""

    def __init__(self, path: Path) -> None:
        self.raw = apsw.Connection(str(path))
        self.raw.set_busy_timeout(5000)

    def begin(self) -> None:
        self.raw.execute("BEGIN IMMEDIATE")

    def execute(self, sql: str) -> None:
        self.raw.execute(sql)

    def scalar(self, sql: str) -> Any:
        return self.raw.execute(sql).fetchall()[0][0]

    def commit(self) -> None:
        self.raw.execute("COMMIT")

    def rollback(self) -> None:
        self.raw.execute("ROLLBACK")


class TestSQLiteStorage(StorageContract):
    @pytest.fixture
    def db_path(self, tmp_path: Path) -> Path:
        return tmp_path / "contract.db"

    @pytest.fixture
    def storage_factory(self, db_path: Path) -> Iterator[Callable[..., SQLiteStorage]]:
        made: list[SQLiteStorage] = []

        def factory(clock: Callable[[], int] | None = None, **options: Any) -> SQLiteStorage:
            storage = SQLiteStorage(db_path, clock=clock, **options)
            storage.migrate()
            made.append(storage)
            return storage

        yield factory
        for storage in made:
            storage.close()

    @pytest.fixture
    def app_connection(
        self, db_path: Path, storage: SQLiteStorage
    ) -> Iterator[SQLiteAppConnection]:
        conn = SQLiteAppConnection(db_path)
        yield conn
        conn.raw.close()

    @pytest.fixture
    def busy_storage(self, storage_factory: Callable[..., SQLiteStorage]) -> SQLiteStorage:
        return storage_factory(busy_timeout=0.05)
