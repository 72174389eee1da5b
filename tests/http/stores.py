"""Both stores under a real hub: a SQLite file, or a fresh schema on the test PostgreSQL server.

Import `store_db` (a fixture) into a test module to run each of its tests on both.
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "postgres"))

from pg_testing import temporary_database


@pytest.fixture(scope="session")
def _pg_hub_database() -> Iterator[str]:
    """A PostgreSQL database of this run for the hub tests (dropped at the end)."""
    yield from temporary_database("jobcore_hub")


@pytest.fixture(params=["sqlite", "postgres"])
def store_db(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """`--db` of an empty store: a SQLite file (a Path), or a PostgreSQL URL (a str)."""
    if request.param == "sqlite":
        return tmp_path / "jobs.db"
    database: str = request.getfixturevalue("_pg_hub_database")
    return f"{database}?schema=h_{secrets.token_hex(4)}"
