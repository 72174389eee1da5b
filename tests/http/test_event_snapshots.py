"""Each event's data is the job as that transition left it, not as it is when read.

Read after the job has completed, its `job:claimed` event still says
`claimed` (with that claim's worker, attempt and lease), its `job:retrying`
event `scheduled` with that failure's error and backoff, on either store.
"""

from __future__ import annotations

from pathlib import Path

from hubproc import Hub, jobcore
from sse import read_events


def test_events_read_later_carry_the_job_as_each_transition_left_it(
    store_db: Path | str, tmp_path: Path
) -> None:
    hub = Hub(store_db, "--lease", "30s", logs=tmp_path)
    try:
        admin_token = jobcore(store_db, "tokens", "create", "--name", "a", "--scope", "admin")
        agent_token = jobcore(
            store_db, "tokens", "create", "--name", "w", "--scope", "agent", "--agent", "w1"
        )
        token = admin_token.stdout.strip()
        with hub.client(token) as admin, hub.client(agent_token.stdout.strip()) as agent:
            job_id = admin.post("/api/jobs", json={"type": "noop"}).json()["id"]
            first = agent.post("/api/jobs/claim", json={"worker_id": "w1"}).json()
            failed = agent.post(
                f"/api/jobs/{job_id}/fail",
                json={
                    "worker_id": "w1",
                    "lease_id": first["lease_id"],
                    "reason": "boom",
                    "retry_in": 0,
                },
            )
            assert failed.status_code == 200 and failed.json()["status"] == "pending"
            second = agent.post("/api/jobs/claim", json={"worker_id": "w1"}).json()
            assert second["id"] == job_id and second["lease_id"] != first["lease_id"]
            done = agent.post(
                f"/api/jobs/{job_id}/result",
                json={"worker_id": "w1", "lease_id": second["lease_id"], "result": {"r": 1}},
            )
            assert done.status_code == 200
        # read from the start, after everything happened
        _, events = read_events(hub.url, token, 5, last_event_id=0)
    finally:
        assert hub.terminate() == 0, hub.output()
    by_kind = [(e.kind, e.data) for e in events if e.data.get("id") == job_id]
    assert [kind for kind, _ in by_kind] == [
        "job:enqueued",
        "job:claimed",
        "job:retrying",
        "job:claimed",
        "job:completed",
    ]
    enqueued, claimed1, retrying, claimed2, completed = (data for _, data in by_kind)
    assert (enqueued["status"], enqueued["attempts"], enqueued["worker_id"]) == ("pending", 0, None)
    assert enqueued["last_error"] is None and enqueued["result"] is None
    assert (claimed1["status"], claimed1["attempts"], claimed1["worker_id"]) == ("claimed", 1, "w1")
    assert claimed1["lease_id"] == first["lease_id"] and claimed1["last_error"] is None
    assert claimed1["result"] is None and claimed1["completed_at"] is None
    assert (retrying["status"], retrying["attempts"], retrying["last_error"]) == (
        "pending",
        1,
        "boom",
    )
    assert retrying["worker_id"] is None and retrying["result"] is None
    assert (claimed2["status"], claimed2["attempts"], claimed2["lease_id"]) == (
        "claimed",
        2,
        second["lease_id"],
    )
    assert claimed2["run_at"] == retrying["run_at"]
    assert (completed["status"], completed["attempts"], completed["result"]) == (
        "completed",
        2,
        {"r": 1},
    )
