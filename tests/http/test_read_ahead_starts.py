"""Read-ahead claims (`start` in `POST /api/jobs/claim`) and `start` reports, on both stores.

DESIGN §6 crash accounting: a handler begins only once its start is durable, so an agent
that dies with read-ahead jobs is charged no attempt for them. The claim marks started
only the first `start` jobs; the others are marked by a `start` item of
`POST /api/jobs/reports`, answered `recorded` once committed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fleet import Fleet, running_fleet

pytestmark = pytest.mark.timeout(120)


class StartsFleet(Fleet):
    def claim(self, n: int, **extra: Any) -> list[dict[str, Any]]:
        """`n` jobs, highest priority first, all claimed by agent a."""
        jobs = [{"type": "noop", "payload": {}, "priority": n - i} for i in range(n)]
        return self.enqueue_and_claim(jobs, **extra)


@pytest.fixture
def fleet(store_db: Path | str, tmp_path: Path) -> Iterator[StartsFleet]:
    with running_fleet(store_db, tmp_path, "2s", StartsFleet) as made:
        yield made


def _starts(client: httpx.Client, worker: str, jobs: list[dict[str, Any]]) -> list[Any]:
    items = [{"job_id": j["id"], "lease_id": j["lease_id"], "kind": "start"} for j in jobs]
    answer = client.post("/api/jobs/reports", json={"worker_id": worker, "reports": items})
    assert answer.status_code == 200, answer.text
    results: list[Any] = answer.json()["results"]
    return results


def _wait_swept(fleet: Fleet, job_ids: list[str]) -> list[dict[str, Any]]:
    """Wait (up to 30 s) until the hub's sweep ended these claims; their jobs as they are."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        jobs = [fleet.job(job_id) for job_id in job_ids]
        if all(job["status"] != "claimed" for job in jobs):
            return jobs
        time.sleep(0.2)
    raise AssertionError(f"still claimed after 30 s: {jobs}")


def test_a_claim_marks_started_only_the_jobs_that_start_at_once(fleet: StartsFleet) -> None:
    jobs = fleet.claim(4, start=1)
    assert jobs[0]["started_at"] is not None
    assert [job["started_at"] for job in jobs[1:]] == [None, None, None]
    # the agent dies: nobody heartbeats or reports. Only the started job is charged.
    swept = _wait_swept(fleet, [job["id"] for job in jobs])
    running, *ahead = swept
    assert running["status"] == "pending" and running["attempts"] == 1
    assert [e["error"] for e in running["errors"]] == ["lease expired"]
    for job in ahead:
        assert job["status"] == "pending" and job["attempts"] == 0, job
        assert job["errors"] == [] and job["last_error"] is None, job
        assert [a["outcome"] for a in job["attempts_detail"]] == ["released"]


def test_a_claim_without_start_marks_every_job_started_as_before(fleet: StartsFleet) -> None:
    jobs = fleet.claim(3)
    assert all(job["started_at"] is not None for job in jobs)
    swept = _wait_swept(fleet, [job["id"] for job in jobs])
    assert [job["attempts"] for job in swept] == [1, 1, 1]
    assert all([e["error"] for e in job["errors"]] == ["lease expired"] for job in swept)


def test_a_start_report_makes_the_start_durable_and_is_fenced(fleet: StartsFleet) -> None:
    jobs = fleet.claim(3, start=0)
    # another agent knowing the lease ids (any reader does) cannot start them
    assert [r["state"] for r in _starts(fleet.b, "agent-b", jobs)] == ["stale"] * 3
    wrong = [{**job, "lease_id": "not-the-lease"} for job in jobs]
    assert [r["state"] for r in _starts(fleet.a, "agent-a", wrong)] == ["stale"] * 3
    assert all(fleet.job(job["id"])["started_at"] is None for job in jobs)

    first = _starts(fleet.a, "agent-a", jobs[:2])
    assert [r["state"] for r in first] == ["recorded", "recorded"]
    started = [fleet.job(job["id"])["started_at"] for job in jobs]
    assert started[0] is not None and started[1] is not None and started[2] is None
    # a repeat (its answer was lost) is answered the same and keeps the first start time
    again = _starts(fleet.a, "agent-a", jobs[:1])
    assert [r["state"] for r in again] == ["recorded"]
    assert fleet.job(jobs[0]["id"])["started_at"] == started[0]
    # the agent dies: the started ones are charged, the one never started is not
    swept = _wait_swept(fleet, [job["id"] for job in jobs])
    assert [job["attempts"] for job in swept] == [1, 1, 0]
    assert [len(job["errors"]) for job in swept] == [1, 1, 0]
    # a start after the lease ended changes nothing
    assert [r["state"] for r in _starts(fleet.a, "agent-a", jobs)] == ["stale"] * 3
    assert [fleet.job(job["id"])["status"] for job in jobs] == ["pending"] * 3


def test_a_cancelled_read_ahead_job_never_starts(fleet: StartsFleet) -> None:
    jobs = fleet.claim(2, start=0)
    assert fleet.admin.delete(f"/api/jobs/{jobs[1]['id']}").status_code == 204
    results = _starts(fleet.a, "agent-a", jobs)
    assert results[0]["state"] == "recorded"
    assert results[1]["state"] == "refused" and results[1]["cancel_requested"] is True
    assert "cancelled before it began" in results[1]["error"]
    assert fleet.job(jobs[1]["id"])["started_at"] is None
    release = [{"job_id": jobs[1]["id"], "lease_id": jobs[1]["lease_id"], "kind": "release"}]
    answer = fleet.a.post("/api/jobs/reports", json={"worker_id": "agent-a", "reports": release})
    assert answer.json()["results"][0]["state"] == "recorded"
    ended = fleet.job(jobs[1]["id"])
    assert ended["status"] == "cancelled" and ended["attempts"] == 0


def test_starts_ride_with_results_in_one_batch(fleet: StartsFleet) -> None:
    jobs = fleet.claim(2, start=1)
    first, second = jobs
    items = [
        {"job_id": second["id"], "lease_id": second["lease_id"], "kind": "start"},
        {"job_id": first["id"], "lease_id": first["lease_id"], "kind": "result", "result": 1},
    ]
    answer = fleet.a.post("/api/jobs/reports", json={"worker_id": "agent-a", "reports": items})
    assert [r["state"] for r in answer.json()["results"]] == ["recorded", "recorded"]
    assert fleet.job(first["id"])["status"] == "completed"
    assert fleet.job(second["id"])["started_at"] is not None


def test_start_out_of_range_is_a_422_and_claims_nothing(fleet: StartsFleet) -> None:
    made = fleet.admin.post("/api/jobs", json={"type": "noop"})
    assert made.status_code == 201, made.text
    for start in (-1, 1001, "all", 1.5):
        body = {"worker_id": "agent-a", "max_jobs": 1, "start": start}
        answer = fleet.a.post("/api/jobs/claim", json=body)
        assert answer.status_code == 422, (start, answer.text)
        assert "start" in answer.text
    assert fleet.job(made.json()["id"])["status"] == "pending"
    spec = fleet.admin.get("/openapi.json").json()["components"]["schemas"]
    assert "start" in spec["ClaimIn"]["properties"]
    assert "start" in str(spec["ReportIn"]["properties"]["kind"])


def test_a_read_ahead_job_past_its_timeout_is_given_back_not_failed(fleet: StartsFleet) -> None:
    register = {"worker_id": "agent-a", "name": "a", "types": ["noop"]}
    assert fleet.a.post("/api/workers/register", json=register).status_code == 200
    made = fleet.admin.post(
        "/api/jobs/batch",
        json={"jobs": [{"type": "noop", "timeout": 0.5, "priority": p} for p in (2, 1)]},
    )
    assert made.status_code in (200, 201), made.text
    body = {"worker_id": "agent-a", "max_jobs": 2, "start": 1}
    running, ahead = fleet.a.post("/api/jobs/claim", json=body).json()
    assert running["started_at"] is not None and ahead["started_at"] is None
    swept = _wait_swept(fleet, [running["id"], ahead["id"]])
    timed_out, given_back = swept
    assert timed_out["last_error"].startswith("max_runtime_exceeded"), timed_out
    assert given_back["status"] == "pending" and given_back["attempts"] == 0, given_back
    assert given_back["errors"] == [] and given_back["last_error"] is None
    assert [r["state"] for r in _starts(fleet.a, "agent-a", [ahead])] == ["stale"]


def test_a_repeated_release_or_fail_of_a_cancelled_job_answers_already(fleet: StartsFleet) -> None:
    """A release or a retryable fail of a cancel-requested job ends it `cancelled`; the same
    report repeated (its answer was lost) is `already`, not `stale`."""
    jobs = fleet.claim(2)
    for job in jobs:
        assert fleet.admin.delete(f"/api/jobs/{job['id']}").status_code == 204
    items = [
        {"job_id": jobs[0]["id"], "lease_id": jobs[0]["lease_id"], "kind": "release"},
        {
            "job_id": jobs[1]["id"],
            "lease_id": jobs[1]["lease_id"],
            "kind": "fail",
            "reason": "stopped: cancel",
            "retry_in": 0,
        },
    ]
    for expected in ("recorded", "already"):
        answer = fleet.a.post("/api/jobs/reports", json={"worker_id": "agent-a", "reports": items})
        assert [r["state"] for r in answer.json()["results"]] == [expected] * 2, answer.text
    assert [fleet.job(job["id"])["status"] for job in jobs] == ["cancelled"] * 2


def test_a_claim_answers_alike_whichever_path_served_it(fleet: Fleet) -> None:
    """One JSON content type: the hub's hot lane serves the claim; the content type twice
    (which the lane leaves alone): the framework's route. Both claim and mark started the
    same way, answer the same job keys, and refuse another agent's worker id the same way."""
    made = fleet.admin.post("/api/jobs/batch", json={"jobs": [{"type": "noop"}] * 6})
    assert made.status_code in (200, 201), made.text
    answers = []
    for copies in (1, 2):
        headers = [("Content-Type", "application/json")] * copies
        body = {"worker_id": "agent-a", "max_jobs": 3, "start": 1}
        got = fleet.a.post("/api/jobs/claim", content=json.dumps(body), headers=headers)
        assert got.status_code == 200, got.text
        jobs = got.json()
        assert len(jobs) == 3 and [job["started_at"] is None for job in jobs] == [False, True, True]
        assert all(job["locked_by"] == "agent-a" and job["lease_id"] for job in jobs)
        answers.append([sorted(job) for job in jobs])
        forged = {"worker_id": "agent-b", "max_jobs": 1}
        refused = fleet.a.post("/api/jobs/claim", content=json.dumps(forged), headers=headers)
        assert refused.status_code == 403 and "agent-b" in refused.json()["error"], refused.text
    assert answers[0] == answers[1]
