"""Owner transitions through the hub are fenced by the lease AND the claim's worker.

An agent that knows another agent's `lease_id` (every reader sees it) cannot
heartbeat, complete, fail or release that agent's claim, on either store.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fleet import Fleet, running_fleet


@pytest.fixture
def agents(store_db: Path | str, tmp_path: Path) -> Iterator[Fleet]:
    with running_fleet(store_db, tmp_path, "30s", Fleet) as made:
        yield made


def _claimed(agents: Fleet) -> dict[str, Any]:
    enqueued = agents.admin.post("/api/jobs", json={"type": "noop"})
    assert enqueued.status_code == 201, enqueued.text
    claimed = agents.a.post("/api/jobs/claim", json={"worker_id": "agent-a"})
    assert claimed.status_code == 200, claimed.text
    job: dict[str, Any] = claimed.json()
    assert job["id"] == enqueued.json()["id"]
    return job


def _unchanged(agents: Fleet, job: dict[str, Any]) -> None:
    now = agents.admin.get(f"/api/jobs/{job['id']}").json()
    assert now["status"] == "claimed"
    assert (now["worker_id"], now["lease_id"]) == ("agent-a", job["lease_id"])
    assert now["lease_expires_at"] == job["lease_expires_at"]
    assert now["attempts_detail"][:-1] == [] and now["result"] is None


def test_another_agent_with_the_lease_id_is_refused_and_nothing_changes(
    agents: Fleet,
) -> None:
    job = _claimed(agents)
    # what any read token sees: the lease id is in the listing
    listed = agents.admin.get("/api/jobs", params={"status": "claimed"}).json()["jobs"]
    lease = next(item["lease_id"] for item in listed if item["id"] == job["id"])
    forged = {"worker_id": "agent-b", "lease_id": lease}
    for route, body in (
        ("heartbeat", {**forged, "progress": {"pct": 99}}),
        ("result", {**forged, "result": {"forged": True}}),
        ("fail", {**forged, "reason": "forged", "retryable": False}),
        ("release", forged),
    ):
        answer = agents.b.post(f"/api/jobs/{job['id']}/{route}", json=body)
        assert answer.status_code == 409, (route, answer.status_code, answer.text)
        _unchanged(agents, job)
    # the simple JSON queue's update, as agent b
    answer = agents.b.put(f"/api/queue/{job['id']}", json={"status": "completed", "result": 1})
    assert answer.status_code == 409, answer.text
    _unchanged(agents, job)

    # the owner's own reports still work, and its repeat answers "already recorded"
    owner = {"worker_id": "agent-a", "lease_id": job["lease_id"]}
    assert agents.a.post(f"/api/jobs/{job['id']}/heartbeat", json=owner).status_code == 200
    body = {**owner, "result": {"ok": 1}}
    first = agents.a.post(f"/api/jobs/{job['id']}/result", json=body)
    assert first.status_code == 200, first.text
    again = agents.a.post(f"/api/jobs/{job['id']}/result", json=body)
    assert again.status_code == 200, again.text
    assert again.json()["status"] == "completed" and again.json()["result"] == {"ok": 1}
    # ...but the other agent's "repeat" with the same lease id is no repeat of its own
    forged_repeat = agents.b.post(
        f"/api/jobs/{job['id']}/result", json={**body, "worker_id": "agent-b"}
    )
    assert forged_repeat.status_code == 409, forged_repeat.text
    done = agents.admin.get(f"/api/jobs/{job['id']}").json()
    assert [(a["worker"], a["outcome"]) for a in done["attempts_detail"]] == [
        ("agent-a", "completed")
    ]


def test_another_agents_fail_repeat_and_release_are_refused(agents: Fleet) -> None:
    job = _claimed(agents)
    body = {"worker_id": "agent-a", "lease_id": job["lease_id"], "reason": "boom"}
    failed = agents.a.post(f"/api/jobs/{job['id']}/fail", json={**body, "retryable": False})
    assert failed.status_code == 200, failed.text
    again = agents.a.post(f"/api/jobs/{job['id']}/fail", json={**body, "retryable": False})
    assert again.status_code == 200 and again.json()["status"] == "failed"
    forged = {**body, "worker_id": "agent-b", "retryable": False}
    assert agents.b.post(f"/api/jobs/{job['id']}/fail", json=forged).status_code == 409
