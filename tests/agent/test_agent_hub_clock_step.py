"""The hub's own sweep after a forward step of the store's clock (issue 17 item 27), with a
remote agent holding the claim: an agent never sweeps, so only the hub's rule is at work.

Before, a step made the agent's live lease look expired and the hub's next sweep re-queued
its job (it then ran twice). Now the hub holds its sweep for one lease of real elapsed time
after it notices a step, by when the agent has heartbeated again.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from hubenv import Agent, Hub, pause, wait_until
from shifted_clock import step

pytest.importorskip("fastapi")

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def clock(tmp_path: Path) -> Path:
    return tmp_path / "clock-offset"


@pytest.fixture
def hub(tmp_path: Path, clock: Path) -> Iterator[Hub]:
    hub = Hub(
        tmp_path,
        lease="4s",  # the hub sweeps every 2 s
        env_extra={
            "JOBCORE_PLUGINS": "jobcore_test_plugin,agent_test_plugin,shifted_clock",
            "JOBCORE_TEST_CLOCK_OFFSET": str(clock),
        },
    )
    yield hub
    hub.close()


def test_a_clock_step_does_not_make_the_hub_reclaim_a_live_agents_job(
    hub: Hub, clock: Path, tmp_path: Path
) -> None:
    started = tmp_path / "started"
    agent = Agent(hub, "a1")
    try:
        wait_until(agent.registered)
        job = hub.enqueue("sleepy", {"seconds": 60, "cooperative": True, "started": str(started)})
        wait_until(started.exists)
        # the agent misses its heartbeats while the step happens (held for 3/4 of a lease):
        # the hub's sweep comes round more than once meanwhile
        agent.signal(signal.SIGSTOP)
        try:
            step(clock, 40_000)  # ten leases ahead
            pause(3.0)
        finally:
            agent.signal(signal.SIGCONT)
        pause(3.0)  # past the hub's hold: its sweeps find the lease extended
        shown = hub.job(job["id"])
        assert (shown["status"], shown["attempts"], shown["errors"]) == ("claimed", 1, [])
        assert started.read_text().split()[1] == "1"  # it never began again
        assert "the store's clock stepped" in hub.log()
    finally:
        agent.kill()
