"""An agent whose `--types` names a type twice still declares its job types' limits (the
hub refuses a body naming a type twice, so the agent sends each type once)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hubenv import Agent, Hub, wait_until

pytest.importorskip("fastapi")

pytestmark = pytest.mark.timeout(300)

PLUGIN = {"JOBCORE_PLUGINS": "jobcore_limits_plugin"}  # the agent's only: not the hub's


@pytest.fixture
def agents() -> Iterator[list[Agent]]:
    made: list[Agent] = []
    yield made
    for agent in made:
        agent.kill()


def test_a_type_named_twice_in_types_still_has_its_limit_declared(
    tmp_path: Path, agents: list[Agent]
) -> None:
    hub = Hub(tmp_path, lease="20s")
    try:
        agent = Agent(
            hub, "twice", env_extra=PLUGIN, extra=("--types", "limited,free,limited,per_customer")
        )
        agents.append(agent)
        wait_until(lambda: "working for" in agent.log(), timeout=120)
        rows = hub.admin.get("/api/limits").json()["limits"]
        found = {(r["scope"], r["name"], r["concurrency"], r["source"]) for r in rows}
        assert found == {("type", "limited", 3, "declared"), ("key", "per_customer", 1, "declared")}
        assert "refused the concurrency limits" not in agent.log(), agent.log()
    finally:
        hub.close()
