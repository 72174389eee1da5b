"""Async handler tests run against both stores: a SQLite file and a PostgreSQL schema."""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "postgres"))  # pg_testing

from async_workers import Workers  # noqa: E402
from pg_testing import SERVER, unavailable, with_database  # noqa: E402


@pytest.fixture(scope="session")
def pg_server_database() -> Iterator[str]:
    try:
        import psycopg
    except ImportError as exc:
        unavailable(f"psycopg is not installed ({exc})")
    name = f"jobcore_async_{os.getpid()}_{secrets.token_hex(3)}"
    try:
        with psycopg.connect(SERVER, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f"CREATE DATABASE {name}")
    except psycopg.OperationalError as exc:
        unavailable(f"no PostgreSQL server reachable at {SERVER} ({str(exc).strip()})")
    yield with_database(SERVER, name)
    with psycopg.connect(SERVER, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


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
