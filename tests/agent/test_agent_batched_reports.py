"""The agent reports in batches (`POST /api/jobs/reports`) through a hub restart, and falls
back to the single routes against a hub without the batched route."""

from __future__ import annotations

import signal
import sqlite3
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from faultproxy import FaultProxy
from hubenv import Agent, Hub, wait_until

pytest.importorskip("fastapi")

pytestmark = pytest.mark.timeout(180)

JOBS = 300


@pytest.fixture
def agents() -> Iterator[list[Agent]]:
    started: list[Agent] = []
    yield started
    for agent in started:
        agent.kill()


def _completed(hub: Hub) -> int:
    counts: dict[str, int] = hub.admin.get("/api/stats").json()["counts"]
    return counts.get("completed", 0)


def _enqueue(hub: Hub, log: Path, n: int) -> list[str]:
    jobs = [{"type": "stamp", "payload": {"log": str(log)}} for _ in range(n)]
    answer = hub.admin.post("/api/jobs/batch", json={"jobs": jobs})
    assert answer.status_code in (200, 201), answer.text
    return [job["id"] for job in answer.json()["jobs"]]


def _outbox_rows(agent: Agent) -> int:
    with sqlite3.connect(agent.cache_dir / "outbox.db") as db:
        (count,) = db.execute("SELECT count(*) FROM outcomes").fetchone()
    return int(count)


def _ran_once_each(hub: Hub, log: Path, ids: list[str]) -> None:
    runs = Counter(line.split()[0] for line in log.read_text().splitlines())
    assert set(runs) == set(ids)
    assert [job for job, n in runs.items() if n != 1] == []
    for job_id in ids:
        job = hub.job(job_id)
        outcomes = [a["outcome"] for a in job["attempts_detail"]]
        # completed once; before it only claims whose answer died with the killed hub
        # (committed, never received: reclaimed when their lease expired, never run)
        assert job["status"] == "completed" and outcomes[-1] == "completed", job
        assert set(outcomes[:-1]) <= {"reclaimed"}, outcomes


def test_batches_through_a_hub_restart_complete_every_job_once(
    tmp_path: Path, agents: list[Agent]
) -> None:
    hub = Hub(tmp_path, lease="10s")  # a claim lost with the hub comes back within the test
    proxy = FaultProxy(hub.url)
    try:
        log = tmp_path / "log"
        agent = Agent(hub, "a1", hub_url=proxy.url, extra=("--concurrency", "4"))
        agents.append(agent)
        wait_until(agent.registered)
        ids = _enqueue(hub, log, JOBS)
        wait_until(lambda: _completed(hub) >= 20)
        hub.stop(signal.SIGKILL)  # mid-drain: outcomes in flight and settling meanwhile
        wait_until(lambda: "not delivered yet" in agent.log())
        hub.start()
        wait_until(lambda: _completed(hub) == JOBS, timeout=120)
        _ran_once_each(hub, log, ids)
        wait_until(lambda: _outbox_rows(agent) == 0)  # every delivered outcome deleted
        # reported in batches: far fewer report requests than jobs, none on the single routes
        assert proxy.requests["result"] == 0, proxy.requests
        assert 0 < proxy.requests["reports"] < JOBS, proxy.requests
        agent.signal(signal.SIGTERM)
        assert agent.wait() == 0
        assert "not delivered yet; kept" not in agent.log()
    finally:
        proxy.close()
        hub.close()


def test_a_hub_without_the_batched_route_gets_single_reports(
    tmp_path: Path, agents: list[Agent]
) -> None:
    hub = Hub(tmp_path, lease="60s")
    proxy = FaultProxy(hub.url)
    proxy.missing.add("reports")  # an older hub: 404
    try:
        log = tmp_path / "log"
        agent = Agent(hub, "a1", hub_url=proxy.url, extra=("--concurrency", "4"))
        agents.append(agent)
        wait_until(agent.registered)
        ids = _enqueue(hub, log, 40)
        wait_until(lambda: _completed(hub) == 40, timeout=60)
        _ran_once_each(hub, log, ids)
        wait_until(lambda: _outbox_rows(agent) == 0)
        assert proxy.requests["result"] == 40, proxy.requests
        # asked once (the reporter and the heartbeat may both ask before either heard), then
        # the single routes
        assert 1 <= proxy.requests["reports"] <= 2, proxy.requests
    finally:
        proxy.close()
        hub.close()
