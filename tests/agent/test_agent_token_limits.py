"""A real `jobcore agent` whose token is limited to job types and queues claims only those."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hubenv import Agent, Hub

pytest.importorskip("fastapi")

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[Hub]:
    hub = Hub(tmp_path, lease="5s")
    yield hub
    hub.close()


def test_an_agent_limited_to_a_type_leaves_the_others_alone(hub: Hub, tmp_path: Path) -> None:
    made = hub.admin.post(
        "/api/tokens",
        json={"name": "a1", "scope": "agent", "types": ["record"], "queues": ["work"]},
    )
    assert made.status_code == 201, made.text
    # older first: an agent claiming beyond its token would take these before `mine`
    shell = hub.enqueue("shell", {"argv": ["touch", str(tmp_path / "pwned")]}, queue="work")
    noop = hub.enqueue("noop", {}, queue="work")
    elsewhere = hub.enqueue("record", {"log": str(tmp_path / "elsewhere.log")}, queue="other")
    mine = hub.enqueue("record", {"log": str(tmp_path / "mine.log")}, queue="work")
    agent = Agent(hub, "a1", token=made.json()["token"])
    try:
        hub.wait_status(mine["id"], "completed")
    finally:
        agent.kill()
    for job in (shell, noop, elsewhere):
        seen = hub.job(job["id"])
        assert seen["status"] == "pending" and seen["attempts"] == 0, (seen, agent.log())
    assert not (tmp_path / "pwned").exists()


def test_children_beyond_the_token_fail_their_job_not_the_agent(hub: Hub) -> None:
    """A handler that enqueues a type the token may not: the hub refuses the result (403), the
    agent fails that job for good, naming the type, and goes on with the next one."""
    made = hub.admin.post("/api/tokens", json={"name": "a2", "scope": "agent", "types": ["spawn"]})
    assert made.status_code == 201, made.text
    spawns = hub.enqueue("spawn", {"children": 2})
    agent = Agent(hub, "a2", token=made.json()["token"])
    try:
        failed = hub.wait_status(spawns["id"], "failed")
        assert "'noop'" in failed["last_error"], failed
        after = hub.enqueue("spawn", {"children": 0})
        hub.wait_status(after["id"], "completed")
        assert agent.proc.poll() is None, agent.log()
    finally:
        agent.kill()
    assert [j["type"] for j in hub.admin.get("/api/jobs").json()["jobs"]] == ["spawn", "spawn"]
