"""The SQLite backend passes the storage conformance suite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from jobcore.storage.sqlite import SQLiteStorage
from jobcore.testing import StorageContract


class TestSQLiteStorage(StorageContract):
    @pytest.fixture
    def storage(self, tmp_path: Path) -> Iterator[SQLiteStorage]:
        storage = SQLiteStorage(tmp_path / "contract.db")
        storage.migrate()
        yield storage
        storage.close()
