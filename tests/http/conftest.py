"""Fixtures of the hub's tests: a real server process, tokens of every scope."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from hubproc import Hub, jobcore, reap_started_since
from testenv import subprocess_env


@dataclass
class Tokens:
    admin: str
    read: str
    produce: str
    agent: str  # acts for agent "agent-1"
    revoked: str


def make_tokens(hub: Hub, db: Path) -> Tokens:
    admin = jobcore(db, "tokens", "create", "--name", "admin", "--scope", "admin").stdout.strip()
    made = {}
    with hub.client(admin) as client:
        for name, scope, agent in (
            ("reader", "read", None),
            ("producer", "produce", None),
            ("agent-1", "agent", "agent-1"),
            ("old", "read", None),
        ):
            answer = client.post(
                "/api/tokens", json={"name": name, "scope": scope, "agent_id": agent}
            )
            assert answer.status_code == 201, answer.text
            made[name] = answer.json()["token"]
        assert client.delete("/api/tokens/old").status_code == 204
    return Tokens(admin, made["reader"], made["producer"], made["agent-1"], made["old"])


@pytest.fixture(autouse=True)
def _no_hub_outlives_its_test() -> Iterator[None]:
    """Hubs a test started and did not stop (it failed first) are killed and reaped.

    Module-scoped hubs are set up before this fixture, so they are not counted as the test's.
    """
    before = len(Hub.started)
    yield
    reap_started_since(before)


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
