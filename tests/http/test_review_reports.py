"""A hostile review of `POST /api/jobs/reports` and the hub's shared commit, on both stores:
reports that share a round with another report of the same job."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fleet import running_fleet
from hubproc import Hub
from test_batched_reports import ReportsFleet, _reports, _states
from testenv import subprocess_env


@pytest.fixture
def fleet(store_db: Path | str, tmp_path: Path) -> Iterator[ReportsFleet]:
    with running_fleet(store_db, tmp_path, "30s", ReportsFleet) as made:
        yield made


def test_a_stale_heartbeat_beside_the_live_one_of_the_same_job_is_stale(
    fleet: ReportsFleet,
) -> None:
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
    fleet: ReportsFleet,
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


RAISING_RETRY_PLUGIN = """
from jobcore import hookimpl


@hookimpl
def jobcore_retry_decision(job, error, policy):
    if "poison-hook" in str(error) or "timed out" in str(error):
        raise RuntimeError("this retry plugin is broken")
    return None
"""


@pytest.fixture
def hooked_fleet(store_db: Path | str, tmp_path: Path) -> Iterator[ReportsFleet]:
    """A fleet whose hub loads a `jobcore_retry_decision` plugin that raises for some
    failures (a plugin's bug)."""
    (tmp_path / "raising_retry.py").write_text(RAISING_RETRY_PLUGIN)
    env = subprocess_env(
        JOBCORE_PLUGINS="jobcore_test_plugin,raising_retry",
        JOBCORE_HTTP_TIMEOUT_CHECK_INTERVAL="0.2",
    )
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
    hub = Hub(store_db, "--lease", "30s", logs=tmp_path, env=env)
    made = ReportsFleet(hub, store_db)
    try:
        yield made
    finally:
        made.close()
        assert hub.terminate() == 0, hub.output()


def test_a_retry_plugin_that_raises_fails_no_report_and_no_batch(
    hooked_fleet: ReportsFleet,
) -> None:
    """The hub called the retry hook unguarded: a plugin raising on one failure answered 500
    to the whole batch, so every later batch of that agent (which carries the failure
    again) failed too and none of its results were recorded. The local worker's rule
    holds: a failing hook falls back to the default policy."""
    fleet = hooked_fleet
    bad, good, single = fleet.claimed(3)
    items = [
        {"job_id": bad["id"], "lease_id": bad["lease_id"], "kind": "fail", "reason": "poison-hook"},
        {"job_id": good["id"], "lease_id": good["lease_id"], "kind": "result", "result": 1},
    ]
    assert _states(_reports(fleet.a, "agent-a", items)) == ["recorded", "recorded"]
    assert _states(_reports(fleet.a, "agent-a", items)) == ["already", "already"]
    failed = fleet.job(bad["id"])
    assert failed["status"] in ("scheduled", "pending"), failed  # the default policy retries
    assert failed["last_error"] == "poison-hook"
    assert fleet.job(good["id"])["status"] == "completed"
    answer = fleet.a.post(
        f"/api/jobs/{single['id']}/fail",
        json={"worker_id": "agent-a", "lease_id": single["lease_id"], "reason": "poison-hook"},
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] in ("scheduled", "pending")


def test_a_refused_item_names_its_problem_as_the_single_routes_do(fleet: ReportsFleet) -> None:
    """Pydantic's `Value error, ` prefix leaked into the batched route's answers."""
    [job] = fleet.claimed(1)
    items = [{"job_id": "a\u0000b", "lease_id": job["lease_id"], "kind": "result"}]
    [refused] = _reports(fleet.a, "agent-a", items)
    assert refused["state"] == "refused"
    assert refused["error"] == (
        "reports.0: job_id: text contains a NUL character (\\u0000); names and ids cannot hold one"
    )
    assert fleet.job(job["id"])["status"] == "claimed"


def test_a_retry_plugin_that_raises_on_timeouts_does_not_stop_the_hubs_maintenance(
    hooked_fleet: ReportsFleet,
) -> None:
    """The hub's maintenance asked the retry hook unguarded for an overdue remote claim: the
    hook raised on every pass, the job stayed claimed past its timeout for good, and the
    pass never reached the lease sweep after it."""
    fleet = hooked_fleet
    made = fleet.admin.post("/api/jobs", json={"type": "noop", "timeout": 0.5})
    assert made.status_code == 201, made.text
    got = fleet.a.post("/api/jobs/claim", json={"worker_id": "agent-a"})
    assert got.status_code == 200, got.text
    job_id = got.json()["id"]
    deadline = time.monotonic() + 15
    while fleet.job(job_id)["status"] == "claimed" and time.monotonic() < deadline:
        time.sleep(0.1)
    ended = fleet.job(job_id)
    assert ended["status"] in ("scheduled", "pending"), ended  # the default policy retries
    assert ended["last_error"].startswith("max_runtime_exceeded"), ended
