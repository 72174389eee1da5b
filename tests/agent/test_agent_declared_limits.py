"""Agents declare their job types' concurrency limits (DESIGN §16), as workers do at start:
a type registered only in agents (the hub and no worker has it) still runs under its
`concurrency=`, across two real `jobcore agent` processes and a real hub; an older hub
without the route: the agent says so once and works on."""

from __future__ import annotations

import signal
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import jobcore_limits_plugin
import jobcore_rates_plugin
import pytest
from faultproxy import FaultProxy
from hubenv import Agent, Hub, wait_until

from jobcore import operating
from jobcore.rates import Rate
from jobcore.testing import make_queue

pytest.importorskip("fastapi")

pytestmark = pytest.mark.timeout(300)

PLUGIN = {"JOBCORE_PLUGINS": "jobcore_limits_plugin"}  # the agents' only: not the hub's


@pytest.fixture
def agents() -> Iterator[list[Agent]]:
    made: list[Agent] = []
    yield made
    for agent in made:
        agent.kill()


def _peak(tally: Path, group: str) -> dict[str, int]:
    with sqlite3.connect(tally, timeout=60) as conn:
        now, peak, runs = conn.execute(
            "SELECT now, peak, runs FROM running WHERE grp = ?", (group,)
        ).fetchone()
    return {"now": now, "peak": peak, "runs": runs}


def _enqueue(hub: Hub, type: str, payload: dict[str, object], count: int) -> list[str]:
    """Enqueued by a producer with the types (the application), straight into the store."""
    producer = make_queue(hub.db, jobcore_limits_plugin)
    try:
        return [producer.enqueue(type, payload).job.id for _ in range(count)]
    finally:
        producer.close()


def _limits(hub: Hub) -> set[tuple[str, str, int, str]]:
    rows = hub.admin.get("/api/limits").json()["limits"]
    return {(r["scope"], r["name"], r["concurrency"], r["source"]) for r in rows}


def test_a_type_only_agents_have_runs_under_its_declared_limit(
    tmp_path: Path, agents: list[Agent]
) -> None:
    hub = Hub(tmp_path, lease="20s")
    try:
        tally = tmp_path / "tally.db"
        payload = {"tally": str(tally), "sleep": 0.2}
        assert _limits(hub) == set()  # nothing declares them: the hub lacks these types
        for n in range(2):
            agents.append(Agent(hub, f"a{n}", env_extra=PLUGIN, extra=("--concurrency", "6")))
        # the work arrives once both are waiting for it: a0 started first (each agent's token
        # is made by a command) and could finish everything before a1 had started
        for agent in agents:
            wait_until(lambda agent=agent: "working for" in agent.log())
        ids = _enqueue(hub, "limited", payload, 24)
        wait_until(lambda: all(hub.job(i)["status"] == "completed" for i in ids), timeout=240)
        assert {("type", "limited", 3, "declared"), ("key", "per_customer", 1, "declared")} <= (
            _limits(hub)
        )
        assert _peak(tally, "limited") == {"now": 0, "peak": 3, "runs": 24}
        ran_by = {hub.job(i)["attempts_detail"][-1]["worker"] for i in ids}
        assert ran_by == {"a0", "a1"}, ran_by
        # a limit set at run time wins over the declared one, also when an agent restarts
        assert hub.admin.put("/api/types/limited/limit", json={"concurrency": 5}).status_code == 200
        agents[0].signal(signal.SIGTERM)
        assert agents[0].wait() == 0
        agents[0].restart()
        wait_until(lambda: "registered as a0" in agents[0].log().split("stopped")[-1])
        wait_until(lambda: "working for" in agents[0].log().split("stopped")[-1])
        assert ("type", "limited", 5, "set") in _limits(hub)
    finally:
        hub.close()


def test_an_older_hub_without_the_route_is_said_once(tmp_path: Path, agents: list[Agent]) -> None:
    hub = Hub(tmp_path, lease="20s")
    proxy = FaultProxy(hub.url)
    proxy.missing.add("limits")  # an older hub: 404
    try:
        agent = Agent(hub, "old", hub_url=proxy.url, env_extra=PLUGIN)
        agents.append(agent)
        [job_id] = _enqueue(hub, "free", {"tally": str(tmp_path / "tally.db")}, 1)
        hub.wait_status(job_id, "completed", timeout=60)
        assert proxy.requests["limits"] == 1, proxy.requests
        said = [line for line in agent.log().splitlines() if "no route for declared limits" in line]
        assert len(said) == 1 and "limited (3)" in said[0], agent.log()
        assert _limits(hub) == set()
    finally:
        proxy.close()
        hub.close()


RATES = {"JOBCORE_PLUGINS": "jobcore_rates_plugin"}  # the agents' only: not the hub's


def _rates(hub: Hub) -> set[tuple[str, str, int, float, str]]:
    rows = hub.admin.get("/api/limits").json()["limits"]
    return {
        (r["scope"], r["name"], r["rate"], r["period"], r["source"])
        for r in rows
        if r.get("rate") is not None
    }


def test_an_agent_declares_the_rate_limits_of_its_types(
    tmp_path: Path, agents: list[Agent]
) -> None:
    hub = Hub(tmp_path, lease="20s")
    try:
        assert _rates(hub) == set()  # nothing declares them: the hub lacks these types
        # an older version of `unrated` declared a rate: this agent's version declares none
        store = make_queue(hub.db, jobcore_rates_plugin)
        try:
            operating.declare_rates(store, [Rate("type", "unrated", 5, 1000, "declared")], [])
        finally:
            store.close()
        assert _rates(hub) == {("type", "unrated", 5, 1.0, "declared")}
        # a rate set at run time wins over the declared one
        assert hub.admin.put("/api/types/pushy/limit", json={"rate": 7, "period": 3}).status_code
        agents.append(Agent(hub, "r0", env_extra=RATES))
        wait_until(lambda: "working for" in agents[0].log())
        assert _rates(hub) == {
            ("type", "rated", 10, 1.0, "declared"),
            ("key", "rated_key", 2, 1.0, "declared"),
            ("type", "pushy", 7, 3.0, "set"),
        }
    finally:
        hub.close()


def test_an_older_hub_without_declared_rates_is_said_once(
    tmp_path: Path, agents: list[Agent]
) -> None:
    hub = Hub(tmp_path, lease="20s")
    proxy = FaultProxy(hub.url)
    proxy.unknown_fields["limits"] = "rates"  # an older hub's schema: 400 unknown field
    try:
        both = {"JOBCORE_PLUGINS": "jobcore_limits_plugin,jobcore_rates_plugin"}
        agent = Agent(hub, "old", hub_url=proxy.url, env_extra=both)
        agents.append(agent)
        [job_id] = _enqueue(hub, "free", {"tally": str(tmp_path / "tally.db")}, 1)
        hub.wait_status(job_id, "completed", timeout=60)
        assert proxy.requests["limits"] == 2, proxy.requests  # with rates, then without
        said = [line for line in agent.log().splitlines() if "declared rate limits" in line]
        assert len(said) == 1 and "an older hub" in said[0], agent.log()
        assert "rated (10/1s)" in said[0], said
        assert ("type", "limited", 3, "declared") in _limits(hub)  # the limits still written
        assert _rates(hub) == set()
    finally:
        proxy.close()
        hub.close()
