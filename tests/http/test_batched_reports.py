"""`POST /api/jobs/reports`: many reports of one agent, each fenced and idempotent as its
single route, answered per item, on both stores."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fleet import Fleet, running_fleet
from hubproc import jobcore


class ReportsFleet(Fleet):
    def claimed(self, n: int, client: httpx.Client | None = None) -> list[dict[str, Any]]:
        return self.enqueue_and_claim([{"type": "noop", "payload": {}} for _ in range(n)], client)


@pytest.fixture
def fleet(store_db: Path | str, tmp_path: Path) -> Iterator[ReportsFleet]:
    with running_fleet(store_db, tmp_path, "30s", ReportsFleet) as made:
        yield made


def _reports(client: httpx.Client, worker: str, items: list[dict[str, Any]]) -> list[Any]:
    answer = client.post("/api/jobs/reports", json={"worker_id": worker, "reports": items})
    assert answer.status_code == 200, answer.text
    results: list[Any] = answer.json()["results"]
    assert [r["job_id"] for r in results] == [i.get("job_id", "") for i in items]
    return results


def _states(results: list[Any]) -> list[str]:
    return [r["state"] for r in results]


def _mixed(jobs: list[dict[str, Any]], worker: str = "agent-a") -> list[dict[str, Any]]:
    a, b, c, d = jobs
    return [
        {"job_id": a["id"], "lease_id": a["lease_id"], "kind": "result", "result": {"n": 1}},
        {
            "job_id": b["id"],
            "lease_id": b["lease_id"],
            "kind": "fail",
            "reason": "boom",
            "retryable": False,
        },
        {"job_id": c["id"], "lease_id": c["lease_id"], "kind": "release"},
        {"job_id": d["id"], "lease_id": d["lease_id"], "kind": "heartbeat", "progress": 5},
    ]


def test_a_batch_records_each_kind_and_its_repeat_answers_already(fleet: ReportsFleet) -> None:
    jobs = fleet.claimed(4)
    items = _mixed(jobs)
    first = _reports(fleet.a, "agent-a", items)
    assert _states(first) == ["recorded"] * 4
    assert first[3]["cancel_requested"] is False
    states = [fleet.job(job["id"]) for job in jobs]
    assert [s["status"] for s in states] == ["completed", "failed", "pending", "claimed"]
    assert states[0]["result"] == {"n": 1}
    assert states[1]["last_error"] == "boom"
    assert states[2]["attempts"] == 0  # a release gives the attempt back
    assert states[3]["lease_expires_at"] >= jobs[3]["lease_expires_at"]

    again = _reports(fleet.a, "agent-a", items)
    # the heartbeat extends again (a live claim); the others were recorded before
    assert _states(again) == ["already", "already", "already", "recorded"]
    assert [fleet.job(job["id"])["status"] for job in jobs] == states_of(states)
    assert fleet.job(jobs[0]["id"])["attempts_detail"][-1]["outcome"] == "completed"


def states_of(jobs: list[dict[str, Any]]) -> list[str]:
    return [job["status"] for job in jobs]


def test_wrong_lease_or_wrong_worker_is_stale_and_changes_nothing(fleet: ReportsFleet) -> None:
    jobs = fleet.claimed(4)
    before = [fleet.job(job["id"]) for job in jobs]
    wrong_lease = [{**item, "lease_id": "not-the-lease"} for item in _mixed(jobs)]
    assert _states(_reports(fleet.a, "agent-a", wrong_lease)) == ["stale"] * 4
    # agent b knows the lease ids (any reader sees them) but is not the claim's worker
    forged = _reports(fleet.b, "agent-b", _mixed(jobs))
    assert _states(forged) == ["stale"] * 4
    after = [fleet.job(job["id"]) for job in jobs]
    assert after == before
    # a token bound to agent-a cannot report as agent-b at all
    answer = fleet.a.post(
        "/api/jobs/reports", json={"worker_id": "agent-b", "reports": _mixed(jobs)}
    )
    assert answer.status_code == 403, answer.text
    assert [fleet.job(job["id"]) for job in jobs] == before


def test_one_bad_item_is_refused_alone(fleet: ReportsFleet) -> None:
    jobs = fleet.claimed(3)
    good = [
        {"job_id": job["id"], "lease_id": job["lease_id"], "kind": "result", "result": i}
        for i, job in enumerate(jobs)
    ]
    items: list[Any] = [
        good[0],
        {"job_id": jobs[1]["id"], "lease_id": jobs[1]["lease_id"], "kind": "explode"},
        good[2],
        {"job_id": jobs[1]["id"], "kind": "result"},  # no lease id
        "not an object",
        {
            "job_id": jobs[1]["id"],
            "lease_id": jobs[1]["lease_id"],
            "kind": "result",
            "children": [{"type": "no-such-type"}],
        },
    ]
    answer = fleet.a.post("/api/jobs/reports", json={"worker_id": "agent-a", "reports": items})
    assert answer.status_code == 200, answer.text
    results = answer.json()["results"]
    assert _states(results) == ["recorded", "refused", "recorded", "refused", "refused", "refused"]
    assert "reports.1: kind" in results[1]["error"]
    assert "reports.3: lease_id" in results[3]["error"]
    assert results[4]["job_id"] == "" and "reports.4" in results[4]["error"]
    assert "children.0" in results[5]["error"] and "no-such-type" in results[5]["error"]
    assert fleet.job(jobs[0]["id"])["result"] == 0
    assert fleet.job(jobs[2]["id"])["result"] == 2
    middle = fleet.job(jobs[1]["id"])
    assert middle["status"] == "claimed" and middle["result"] is None
    # the refused job can still be reported properly
    assert _states(_reports(fleet.a, "agent-a", [good[1]])) == ["recorded"]


def test_a_revoked_token_gets_the_batch_refused_and_nothing_changes(fleet: ReportsFleet) -> None:
    jobs = fleet.claimed(4)
    before = [fleet.job(job["id"]) for job in jobs]
    assert fleet.admin.delete("/api/tokens/agent-a").status_code == 204
    answer = fleet.a.post(
        "/api/jobs/reports", json={"worker_id": "agent-a", "reports": _mixed(jobs)}
    )
    assert answer.status_code == 401, answer.text
    assert "revoked" in answer.json()["error"]
    assert [fleet.job(job["id"]) for job in jobs] == before


def test_a_read_token_and_an_oversized_batch_are_refused(
    fleet: ReportsFleet, store_db: Path | str
) -> None:
    reader = jobcore(store_db, "tokens", "create", "--name", "r", "--scope", "read")
    with httpx.Client(
        base_url=str(fleet.admin.base_url),
        headers={"Authorization": f"Bearer {reader.stdout.strip()}"},
    ) as client:
        answer = client.post("/api/jobs/reports", json={"worker_id": "agent-a", "reports": []})
        assert answer.status_code == 403, answer.text
    spec = fleet.admin.get("/openapi.json").json()  # documented with its shapes
    route = spec["paths"]["/api/jobs/reports"]["post"]
    assert "ReportsIn" in str(route["requestBody"]) and "ReportsOut" in str(route["responses"])
    schemas = spec["components"]["schemas"]
    assert "ReportIn" in str(schemas["ReportsIn"]) and "ReportOut" in str(schemas["ReportsOut"])
    assert {"job_id", "lease_id", "kind"} <= set(schemas["ReportIn"]["required"])
    many = [{"job_id": "x", "lease_id": "y", "kind": "release"}] * 1001
    answer = fleet.a.post("/api/jobs/reports", json={"worker_id": "agent-a", "reports": many})
    assert answer.status_code in (400, 422), answer.text


def test_every_answer_has_the_documented_shape_whichever_path_served_it(fleet: Fleet) -> None:
    """A report with one JSON content type is answered by the hub's hot lane; one whose
    content type comes twice (which the lane leaves alone) by the framework's route: both
    answer every item with exactly `ReportOut`'s keys, as the OpenAPI document says."""
    spec = fleet.admin.get("/openapi.json").json()
    documented = set(spec["components"]["schemas"]["ReportOut"]["properties"])
    jobs = fleet.claimed(8)
    for copies, mine in ((1, jobs[:4]), (2, jobs[4:])):
        items = [*_mixed(mine), {"job_id": mine[0]["id"], "kind": "result"}]  # no lease id
        answer = fleet.a.post(
            "/api/jobs/reports",
            content=json.dumps({"worker_id": "agent-a", "reports": items}),
            headers=[("Content-Type", "application/json")] * copies,
        )
        assert answer.status_code == 200, answer.text
        results = answer.json()["results"]
        assert _states(results) == ["recorded"] * 4 + ["refused"]
        assert [set(result) for result in results] == [documented] * 5
        assert results[3]["cancel_requested"] is False and results[0]["error"] is None
