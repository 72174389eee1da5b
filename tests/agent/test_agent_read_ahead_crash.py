"""An agent killed with read-ahead jobs: the hub charges only the job that was running.

DESIGN §6 crash accounting: a handler begins only once its start is durable, so a job
whose handler takes its worker down is charged one attempt per crash, and a prefetched
job that never started costs no attempt. Real hub (SQLite and PostgreSQL stores) and a
real agent process, killed with SIGKILL.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hubenv import Agent, Hub, wait_until

sys.path.insert(0, str(Path(__file__).parents[1] / "http"))

from stores import _pg_hub_database, store_db  # noqa: F401  (fixtures: both stores)

pytest.importorskip("fastapi")

pytestmark = pytest.mark.timeout(180)

READ_AHEAD = 4


@pytest.fixture
def hub(tmp_path: Path, store_db: Path | str) -> Iterator[Hub]:  # noqa: F811
    made = Hub(tmp_path, lease="3s", db=store_db)
    yield made
    made.close()


@pytest.fixture
def agents() -> Iterator[list[Agent]]:
    started: list[Agent] = []
    yield started
    for agent in started:
        agent.kill()


def _errors(job: dict[str, Any]) -> list[str]:
    return [entry["error"] for entry in job["errors"]]


def test_sigkill_charges_the_running_job_and_not_the_read_ahead(
    hub: Hub, agents: list[Agent], tmp_path: Path
) -> None:
    log = tmp_path / "log"
    # read-ahead waits behind the long job until the kill (not given back after 1 s)
    agent = Agent(
        hub, "a1", extra=("--concurrency", "1"), env_extra={"JOBCORE_PREFETCH_WAIT": "120"}
    )
    agents.append(agent)
    warm = [hub.enqueue("stamp", {"log": str(log)}) for _ in range(3)]  # short: read-ahead on
    for job in warm:
        hub.wait_status(job["id"], "completed")
    started = tmp_path / "long-started"
    long = hub.enqueue("stamp", {"log": str(log), "sleep": 120, "started": str(started)})
    wait_until(started.exists)
    # its one executor is busy: these are claimed ahead, waiting for the slot
    batch = [{"type": "stamp", "payload": {"log": str(log)}} for _ in range(READ_AHEAD)]
    made = hub.admin.post("/api/jobs/batch", json={"jobs": batch})
    assert made.status_code in (200, 201), made.text
    ahead = [job["id"] for job in made.json()["jobs"]]
    wait_until(lambda: all(hub.job(i)["status"] == "claimed" for i in ahead))
    assert all(hub.job(i)["locked_by"] == "a1" for i in ahead)

    agent.signal(signal.SIGKILL)
    agent.wait()
    ran = {line.split()[0] for line in log.read_text().splitlines()}
    assert ran.isdisjoint(ahead), "a read-ahead job ran before the kill"

    # the hub's sweep (every lease/2) ends the dead agent's claims once their leases expire
    wait_until(lambda: hub.job(long["id"])["status"] != "claimed", timeout=60)
    wait_until(lambda: all(hub.job(i)["status"] != "claimed" for i in ahead), timeout=60)
    crashed = hub.job(long["id"])
    assert crashed["status"] == "pending" and crashed["attempts"] == 1, crashed
    assert _errors(crashed) == ["lease expired"]
    assert [a["outcome"] for a in crashed["attempts_detail"]] == ["reclaimed"]
    for job_id in ahead:
        job = hub.job(job_id)
        assert job["status"] == "pending" and job["attempts"] == 0, job
        assert _errors(job) == [] and job["last_error"] is None, job
        assert [a["outcome"] for a in job["attempts_detail"]] == ["released"]

    # another agent runs them: one attempt each, the one its handler counted
    hub.admin.delete(f"/api/jobs/{long['id']}")  # its 120 s sleep is not this test's concern
    agents.append(Agent(hub, "a2", extra=("--concurrency", "2")))
    for job_id in ahead:
        done = hub.wait_status(job_id, "completed", timeout=60)
        assert done["attempts"] == 1 and done["result"] == {"attempt": 1, "worker": "a2"}
        assert _errors(done) == []


def test_a_hub_refusing_start_gets_claims_that_all_start(
    tmp_path: Path, agents: list[Agent]
) -> None:
    from faultproxy import FaultProxy

    hub = Hub(tmp_path, lease="30s")
    proxy = FaultProxy(hub.url)
    proxy.unknown_fields["claim"] = "start"  # an older hub: 400 `start: unknown field`
    try:
        log = tmp_path / "log"
        agent = Agent(hub, "a1", hub_url=proxy.url, extra=("--concurrency", "1"))
        agents.append(agent)
        jobs = [{"type": "stamp", "payload": {"log": str(log)}} for _ in range(40)]
        made = hub.admin.post("/api/jobs/batch", json={"jobs": jobs}).json()["jobs"]
        for job in made:
            done = hub.wait_status(job["id"], "completed", timeout=60)
            assert done["attempts"] == 1 and _errors(done) == []
        assert "the hub takes no read-ahead starts" in agent.log()
        assert proxy.items["start"] == 0 and proxy.items["result"] == 40, proxy.items
    finally:
        proxy.close()
        hub.close()
