"""Async handler tests run against both stores: a SQLite file and a PostgreSQL schema."""

from __future__ import annotations

import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "postgres"))  # pg_testing

from async_workers import Workers  # noqa: E402
from pg_testing import temporary_database  # noqa: E402


@pytest.fixture(scope="session")
def pg_server_database() -> Iterator[str]:
    yield from temporary_database("jobcore_async")


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "jobs.db")
    database: str = request.getfixturevalue("pg_server_database")
    return f"{database}?schema=a{secrets.token_hex(4)}"


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return str(tmp_path / "jobs.db")


@pytest.fixture
def workers(tmp_path: Path, store_url: str) -> Iterator[Workers]:
    made = Workers(tmp_path, store_url)
    yield made
    made.close()


@pytest.fixture
def sqlite_workers(tmp_path: Path, sqlite_url: str) -> Iterator[Workers]:
    made = Workers(tmp_path, sqlite_url)
    yield made
    made.close()
