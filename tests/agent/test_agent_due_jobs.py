"""An idle `jobcore agent` gets a delayed job when it becomes due, through its open long-poll
(not by its next poll, up to `poll_wait` = 25 s later)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from hubenv import Agent, Hub, pause, wait_until

pytest.importorskip("fastapi")

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[Hub]:
    hub = Hub(tmp_path, lease="120s")  # its sweep (every lease/2) wakes no claim here
    yield hub
    hub.close()


def _ms(value: str) -> float:
    return datetime.fromisoformat(value).timestamp() * 1000


def test_an_idle_agent_claims_a_delayed_job_when_it_is_due(hub: Hub) -> None:
    agent = Agent(hub, "a1")
    try:
        wait_until(agent.registered)
        pause(1.0)  # let the agent's first claims pass: it now waits in a long-poll
        job = hub.enqueue("noop", {}, delay=2)
        assert job["status"] == "scheduled"
        done = hub.wait_status(job["id"], "completed", "failed", timeout=40)
        assert done["status"] == "completed", done
        late = (_ms(done["claimed_at"]) - _ms(done["run_at"])) / 1000
        assert late < 1.0, f"claimed {late:.1f} s after it was due"
    finally:
        agent.kill()
