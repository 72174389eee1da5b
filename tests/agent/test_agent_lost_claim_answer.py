"""A claim answer lost on the way to the agent (the hub committed it, the agent never saw it).

Found by the soak (benchmarks/soak.py): the hub marks an agent's claim started when it
answers it, so a claim whose answer the network dropped was charged an attempt when its
lease expired; after `max_attempts` such losses the job ended `failed` ("lease expired")
without its handler ever running. The agent now retries a claim with the same
`X-Idempotency-Key` and the hub answers the repeat with the jobs it still holds for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from faultproxy import FaultProxy
from hubenv import Agent, Hub, wait_until

pytest.importorskip("fastapi")
pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[Hub]:
    hub = Hub(tmp_path, lease="2s")
    yield hub
    hub.close()


def test_a_job_whose_claim_answer_was_lost_still_runs(hub: Hub, tmp_path: Path) -> None:
    log = tmp_path / "stamps"
    job = hub.enqueue("stamp", {"log": str(log)}, max_attempts=1)
    proxy = FaultProxy(hub.url)
    proxy.drop_next["claim"] = 1  # the first claim, which carries the job, never answers
    agent = Agent(hub, "lost-claim", hub_url=proxy.url)
    try:
        wait_until(lambda: proxy.faults["drop_after"] == 1)
        final = hub.wait_status(job["id"], "completed", "failed", timeout=60)
        outcomes = [entry["outcome"] for entry in final["attempts_detail"]]
        ran = log.read_text().split() if log.exists() else []
        assert final["status"] == "completed", (outcomes, final["last_error"], ran)
    finally:
        agent.kill()
        proxy.close()


def test_a_repeated_claim_key_answers_the_same_live_claims_only(hub: Hub) -> None:
    job = hub.enqueue("noop", {})
    hub.enqueue("noop", {})  # claimable too: a repeat must not take it
    tokens = {name: hub.token(f"agent-{name}", "agent", name) for name in ("a1", "a2")}

    def claim(worker: str, key: str) -> httpx.Response:
        return httpx.post(
            f"{hub.url}/api/jobs/claim",
            json={"worker_id": worker, "max_jobs": 1},
            headers={"Authorization": f"Bearer {tokens[worker]}", "X-Idempotency-Key": key},
            timeout=10,
        )

    first = claim("a1", "k1").json()
    assert [item["id"] for item in first] == [job["id"]]
    again = claim("a1", "k1").json()
    assert [(item["id"], item["lease_id"]) for item in again] == [(job["id"], first[0]["lease_id"])]
    assert hub.admin.get("/api/stats").json()["counts"]["claimed"] == 1  # nothing more taken
    other = claim("a2", "k1").json()  # another agent's key is its own: a new claim
    assert [item["id"] for item in other] != [job["id"]]
    done = httpx.post(
        f"{hub.url}/api/jobs/{job['id']}/result",
        json={"worker_id": "a1", "lease_id": first[0]["lease_id"], "result": None},
        headers={"Authorization": f"Bearer {tokens['a1']}"},
        timeout=10,
    )
    assert done.status_code == 200, done.text
    assert claim("a1", "k1").status_code == 204  # no longer held: nothing replayed
