"""An agent whose outbox cannot be written (a real SQLite I/O error) still reports its outcomes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from faultproxy import FaultProxy
from hubenv import Agent, Hub, pause, wait_until

pytest.importorskip("fastapi")

pytestmark = pytest.mark.timeout(120)

OUTBOX_ERROR = "cannot write the outbox"


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[Hub]:
    hub = Hub(tmp_path, lease="4s")
    yield hub
    hub.close()


def faulty_agent(hub: Hub, flag: Path, **options: object) -> Agent:
    """An agent whose SQLite writes fail with an I/O error while `flag` exists."""
    return Agent(
        hub,
        "a1",
        env_extra={
            "JOBCORE_PLUGINS": "jobcore_test_plugin,agent_test_plugin,faulty_disk",
            "FAULTY_DISK_WHILE": str(flag),
        },
        **options,  # type: ignore[arg-type]
    )


def test_outcomes_go_straight_to_the_hub_when_the_outbox_fails(hub: Hub, tmp_path: Path) -> None:
    flag, log = tmp_path / "disk-broken", tmp_path / "log"
    starts = [tmp_path / f"started-{n}" for n in range(3)]
    jobs = [
        hub.enqueue("stamp", {"log": str(log), "sleep": 1, "started": str(started)})
        for started in starts
    ]
    agent = faulty_agent(hub, flag, extra=("--concurrency", "3"))
    try:
        wait_until(lambda: all(started.exists() for started in starts))
        flag.touch()  # the disk fails while the jobs run: no outcome fits in the outbox
        for job in jobs:
            done = hub.wait_status(job["id"], "completed", "failed", timeout=60)
            assert done["status"] == "completed", done
            assert done["attempts"] == 1 and done["result"]["worker"] == "a1"
        assert len(log.read_text().splitlines()) == 3  # each ran once
        errors = [line for line in agent.log().splitlines() if OUTBOX_ERROR in line]
        assert len(errors) == 1, agent.log()  # said once, naming the file
        assert str(agent.cache_dir / "outbox.db") in errors[0]
        assert "Traceback" not in agent.log()
    finally:
        agent.kill()


def test_an_outcome_neither_saved_nor_delivered_is_kept_until_the_hub_takes_it(
    hub: Hub, tmp_path: Path
) -> None:
    flag, log, started = tmp_path / "disk-broken", tmp_path / "log", tmp_path / "started"
    proxy = FaultProxy(hub.url)
    job = hub.enqueue("stamp", {"log": str(log), "sleep": 1, "started": str(started)})
    agent = faulty_agent(hub, flag, hub_url=proxy.url)
    try:
        wait_until(started.exists)
        flag.touch()
        proxy.rates["bad_gateway"] = 1.0  # and the hub is away when the job ends
        wait_until(lambda: OUTBOX_ERROR in agent.log())
        pause(2)  # the agent keeps trying meanwhile
        assert hub.job(job["id"])["status"] == "claimed"
        proxy.rates["bad_gateway"] = 0.0
        done = hub.wait_status(job["id"], "completed", "failed", timeout=60)
        assert done["status"] == "completed" and done["attempts"] == 1, done
        assert len(log.read_text().splitlines()) == 1
    finally:
        agent.kill()
        proxy.close()
