"""Fixtures of the hub's tests: a real server process, tokens of every scope."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from hubproc import RUNNING, Hub, Tokens, make_tokens
from stores import _pg_hub_database, store_db  # noqa: F401  (fixtures: both stores)
from testenv import subprocess_env


@pytest.fixture(autouse=True)
def _stop_leftover_hubs() -> Iterator[None]:
    """A hub a test started and did not stop (it failed first) is killed, never leaked."""
    before = set(RUNNING)
    yield
    for leftover in set(RUNNING) - before:
        leftover.kill()


@pytest.fixture(scope="module")
def hub_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hub") / "jobs.db"


@pytest.fixture(scope="module")
def hub(hub_db: Path) -> Iterator[Hub]:
    """One hub per test module (auth on; the test plugin's job types; lease 30s)."""
    server = Hub(hub_db, "--lease", "30s", env=subprocess_env(JOBCORE_WAKE_CHECK_INTERVAL="0.002"))
    yield server
    assert server.terminate() == 0, server.output()


@pytest.fixture(scope="module")
def tokens(hub: Hub, hub_db: Path) -> Tokens:
    return make_tokens(hub, hub_db)
