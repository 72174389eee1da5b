"""A job type's declared `rate=` holds when only agents run it (DESIGN §16): a real
`jobcore agent` writes the rates its types declare through the hub at start
(`POST /api/workers/limits`, `rates`/`unrated`), as a worker writes them to the store;
no window of the period then holds more starts."""

from __future__ import annotations

import pytest
from hubenv import RATES, Agent, Hub, wait_until

from jobcore.testing import make_queue

pytest.importorskip("fastapi")

pytestmark = pytest.mark.timeout(300)


def _rates(hub: Hub) -> dict[tuple[str, str], tuple[int, float, str]]:
    rows = hub.admin.get("/api/limits").json()["limits"]
    return {(r["scope"], r["name"]): (r["rate"], r["period"], r["source"]) for r in rows}


def test_an_agent_only_type_keeps_its_declared_rate(rates_hub: Hub) -> None:
    hub = rates_hub
    agent = Agent(hub, "a0", env_extra=RATES)
    try:
        wait_until(lambda: ("type", "rated") in _rates(hub), timeout=60)
        assert _rates(hub) == {
            ("type", "rated"): (10, 1.0, "declared"),
            ("key", "rated_key"): (2, 1.0, "declared"),
            ("type", "pushy"): (5, 1.0, "declared"),
        }
        ids = [hub.enqueue("rated", {})["id"] for _ in range(15)]
        wait_until(lambda: all(hub.job(i)["status"] == "completed" for i in ids), timeout=120)
    finally:
        agent.kill()
    queue = make_queue(hub.db)
    try:
        jobs = queue.storage.list_jobs(types=["rated"], limit=100)
    finally:
        queue.close()
    times = sorted(job.claimed_at for job in jobs if job.claimed_at is not None)
    assert len(times) == 15
    for start, at in enumerate(times):
        assert sum(1 for t in times[start:] if t < at + 1000) <= 10, times
