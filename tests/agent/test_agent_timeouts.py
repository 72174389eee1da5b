"""A remote attempt past its `timeout` ends with one reason, whoever notices first: the
agent, the `exec` runner's own timer or the hub (DESIGN §11 `max_runtime_exceeded`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hubenv import Agent, Hub

from conftest import MakeSolver

pytest.importorskip("fastapi")

pytestmark = pytest.mark.timeout(120)

REASON = "max_runtime_exceeded: timed out after 2s"


@pytest.fixture
def quiet_hub(tmp_path: Path) -> Iterator[Hub]:
    """A hub that checks remote runtimes only hourly: the agent notices first."""
    hub = Hub(tmp_path, lease="60s", env_extra={"JOBCORE_HTTP_TIMEOUT_CHECK_INTERVAL": "3600"})
    yield hub
    hub.close()


def _ended(hub: Hub, job_id: str) -> dict[str, object]:
    job = hub.wait_status(job_id, "failed", timeout=60)
    return job


def test_the_agent_noticing_first_says_max_runtime_exceeded(quiet_hub: Hub) -> None:
    agent = Agent(quiet_hub, "a1")
    try:
        job = quiet_hub.enqueue(
            "sleepy", {"seconds": 30, "cooperative": True}, timeout=2, max_attempts=1
        )
        done = _ended(quiet_hub, job["id"])
        assert done["last_error"] == REASON, done
    finally:
        agent.kill()


def test_the_exec_runner_or_the_agent_say_the_same(quiet_hub: Hub, make_solver: MakeSolver) -> None:
    data, digest = make_solver("time.sleep(30)")
    stored = quiet_hub.admin.post("/api/artifacts", content=data)
    assert stored.status_code in (200, 201), stored.text
    agent = Agent(quiet_hub, "a1")
    try:
        job = quiet_hub.enqueue("exec", {"sha256": digest}, timeout=2, max_attempts=1)
        done = _ended(quiet_hub, job["id"])
        assert done["last_error"] == REASON, done
    finally:
        agent.kill()


def test_the_hub_noticing_first_says_the_same(tmp_path: Path) -> None:
    hub = Hub(tmp_path, lease="60s")  # checks remote runtimes every second
    try:
        token = hub.token("silent", "agent", "silent")
        with httpx.Client(
            base_url=hub.url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        ) as silent:
            job = hub.enqueue("noop", {}, timeout=2, max_attempts=1)
            claimed = silent.post("/api/jobs/claim", json={"worker_id": "silent"})
            assert claimed.status_code == 200 and claimed.json()["id"] == job["id"]
            done = _ended(hub, job["id"])  # the silent agent never reports
            assert done["last_error"] == REASON, done
            beat = silent.post(
                f"/api/jobs/{job['id']}/heartbeat",
                json={"worker_id": "silent", "lease_id": claimed.json()["lease_id"]},
            )
            assert beat.status_code == 200 and beat.json()["cancel_requested"] is True
    finally:
        hub.close()
