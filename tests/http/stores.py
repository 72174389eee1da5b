"""Both stores under a real hub: a SQLite file, or a fresh schema on the test PostgreSQL server.

Import `store_db` (a fixture) into a test module to run each of its tests on both.
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "postgres"))

from pg_testing import SERVER, unavailable, with_database


@pytest.fixture(scope="session")
def _pg_hub_database() -> Iterator[str]:
    """A PostgreSQL database of this run for the hub tests (dropped at the end)."""
    try:
        import psycopg
    except ImportError as exc:
        unavailable(f"psycopg is not installed ({exc}); pip install -e '.[postgres]'")
    name = f"jobcore_hub_{os.getpid()}_{secrets.token_hex(3)}"
    try:
        with psycopg.connect(SERVER, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f"CREATE DATABASE {name}")
    except psycopg.OperationalError as exc:
        unavailable(f"no PostgreSQL server reachable at {SERVER} ({str(exc).strip()})")
    yield with_database(SERVER, name)
    with psycopg.connect(SERVER, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(params=["sqlite", "postgres"])
def store_db(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """`--db` of an empty store: a SQLite file (a Path), or a PostgreSQL URL (a str)."""
    if request.param == "sqlite":
        return tmp_path / "jobs.db"
    database: str = request.getfixturevalue("_pg_hub_database")
    return f"{database}?schema=h_{secrets.token_hex(4)}"
