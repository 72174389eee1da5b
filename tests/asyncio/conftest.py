"""Async handler tests run against both stores: a SQLite file and a PostgreSQL schema."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "postgres"))  # pg_testing

from pg_testing import SERVER, unavailable, with_database  # noqa: E402
from testenv import subprocess_env  # noqa: E402

from jobcore import Queue  # noqa: E402
from jobcore.testing import make_queue  # noqa: E402

JOBCORE = [sys.executable, "-m", "jobcore"]
PLUGINS = "jobcore_test_plugin,jobcore_async_plugin"


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


class Workers:
    """`jobcore run` processes with the async test plugin on one store, and a Queue on it."""

    def __init__(self, tmp_path: Path, url: str) -> None:
        self.tmp = tmp_path
        self.url = url
        self.log = str(tmp_path / "notes.log")
        self.env = subprocess_env(JOBCORE_DB=url, JOBCORE_PLUGINS=PLUGINS)
        self.procs: list[subprocess.Popen[bytes]] = []
        plugins = []
        if url.startswith("postgresql"):
            import jobcore_postgres

            plugins.append(jobcore_postgres)
        self.queue: Queue = make_queue(url, *plugins, modules=["jobcore_async_plugin"])
        self.queue.storage.migrate()

    def start(self, *options: str, **env: str) -> subprocess.Popen[bytes]:
        with open(self.tmp / f"worker{len(self.procs)}.log", "wb") as out:
            proc = subprocess.Popen(
                [*JOBCORE, "run", *options],
                env={**self.env, **env},
                cwd=self.tmp,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.procs.append(proc)
        return proc

    def output(self, index: int = -1) -> str:
        return (self.tmp / f"worker{index % len(self.procs)}.log").read_text(errors="replace")

    def notes(self) -> list[list[str]]:
        path = Path(self.log)
        if not path.exists():
            return []
        return [line.split() for line in path.read_text().splitlines()]

    def noted(self, event: str) -> list[list[str]]:
        return [line for line in self.notes() if line[0] == event]

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
        self.queue.close()


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
