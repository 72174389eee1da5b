"""A hostile review of `POST /api/jobs/reports` and the hub's shared commit, on both stores:
reports that share a round with another report of the same job."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hubproc import Hub
from test_batched_reports import Fleet, _reports, _states


@pytest.fixture
def fleet(store_db: Path | str, tmp_path: Path) -> Iterator[Fleet]:
    hub = Hub(store_db, "--lease", "30s", logs=tmp_path)
    made = Fleet(hub, store_db)
    try:
        yield made
    finally:
        made.close()
        assert hub.terminate() == 0, hub.output()


def test_a_stale_heartbeat_beside_the_live_one_of_the_same_job_is_stale(fleet: Fleet) -> None:
    """The store answers extensions by job id: a heartbeat of an old lease that reached the
    writer with the live one (one batch) was answered `recorded`, so its agent kept running a
    job that was no longer its own, and its progress was shown."""
    [job] = fleet.claimed(1)
    live = {"job_id": job["id"], "lease_id": job["lease_id"], "kind": "heartbeat"}
    stale = {**live, "lease_id": "an-old-lease", "progress": "from the old lease"}
    for items in ([stale, live], [live, stale]):
        results = _reports(fleet.a, "agent-a", items)
        assert _states(results) == ["stale", "recorded"][:: 1 if items[0] is stale else -1]
    workers = fleet.admin.get("/api/workers").json()["workers"]
    shown = [w["progress"] for w in workers if w["worker_id"] == "agent-a"]
    assert shown and job["id"] not in shown[0], shown
    # two reports of the live lease in one batch are both its own
    assert _states(_reports(fleet.a, "agent-a", [live, live])) == ["recorded", "recorded"]


def test_two_reports_of_one_job_in_a_batch_apply_in_their_order_on_every_store(
    fleet: Fleet,
) -> None:
    """PostgreSQL applied one call's outcomes grouped by kind: a failure listed before a
    result of the same lease lost to it there (the job completed) but won on SQLite."""
    other, job = fleet.claimed(2)

    def item(claimed: dict[str, Any], kind: str, **more: Any) -> dict[str, Any]:
        return {"job_id": claimed["id"], "lease_id": claimed["lease_id"], "kind": kind, **more}

    items = [item(other, "result"), item(job, "fail", reason="first"), item(job, "result")]
    assert _states(_reports(fleet.a, "agent-a", items)) == ["recorded", "recorded", "stale"]
    after = fleet.job(job["id"])
    assert after["status"] in ("scheduled", "pending") and after["last_error"] == "first"
    assert fleet.job(other["id"])["status"] == "completed"
