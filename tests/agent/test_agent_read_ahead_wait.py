"""Read-ahead jobs do not sit behind a long job: an agent whose every slot is taken by
handlers running past `prefetch_wait` gives its read-ahead back (no attempt spent) and
claims none ahead, so another agent runs them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hubenv import Agent, Hub, wait_until

pytest.importorskip("fastapi")

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[Hub]:
    made = Hub(tmp_path, lease="30s")
    yield made
    made.close()


@pytest.fixture
def agents() -> Iterator[list[Agent]]:
    started: list[Agent] = []
    yield started
    for agent in started:
        agent.kill()


def test_read_ahead_behind_a_long_job_goes_to_an_idle_agent(
    hub: Hub, agents: list[Agent], tmp_path: Path
) -> None:
    log = tmp_path / "log"
    busy = Agent(hub, "busy", extra=("--concurrency", "1"))
    agents.append(busy)
    warm = [hub.enqueue("stamp", {"log": str(log)}) for _ in range(3)]  # short: read-ahead on
    for job in warm:
        hub.wait_status(job["id"], "completed")
    started = tmp_path / "long-started"
    long = hub.enqueue("stamp", {"log": str(log), "sleep": 60, "started": str(started)})
    wait_until(started.exists)
    made = hub.admin.post(
        "/api/jobs/batch", json={"jobs": [{"type": "stamp", "payload": {"log": str(log)}}] * 3}
    )
    ahead = [job["id"] for job in made.json()["jobs"]]
    idle = Agent(hub, "idle", extra=("--concurrency", "2"))
    agents.append(idle)
    # well before the long job ends (60 s), the idle agent has run them, each once
    for job_id in ahead:
        done = hub.wait_status(job_id, "completed", timeout=25)
        assert done["result"]["worker"] == "idle" and done["attempts"] == 1, done
    assert hub.job(long["id"])["status"] == "claimed"
