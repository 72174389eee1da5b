"""A claim's last heartbeat `progress` is dropped from the hub's memory when the claim ends.

Seen from outside: the next claim of the same job (after a release, or an
operator's retry of a failure) starts with no progress, though no
`GET /api/workers` (which prunes progress too) ran in between.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import apsw
import httpx
import pytest
from hubproc import Hub, Tokens
from jobcore_http.workers import Registry

from jobcore.storage.sqlite import SQLiteStorage


def _claim(agent: httpx.Client, queue: str) -> dict[str, Any]:
    answer = agent.post("/api/jobs/claim", json={"worker_id": "agent-1", "queues": [queue]})
    assert answer.status_code == 200, answer.text
    job: dict[str, Any] = answer.json()
    return job


@pytest.mark.parametrize("end", ["release", "fail"])
def test_progress_of_an_ended_claim_is_forgotten(hub: Hub, tokens: Tokens, end: str) -> None:
    queue = f"progress-{end}"
    with hub.client(tokens.admin) as admin, hub.client(tokens.agent) as agent:
        job_id = admin.post("/api/jobs", json={"type": "noop", "queue": queue}).json()["id"]
        first = _claim(agent, queue)
        owner = {"worker_id": "agent-1", "lease_id": first["lease_id"]}
        beat = agent.post(f"/api/jobs/{job_id}/heartbeat", json={**owner, "progress": {"p": 50}})
        assert beat.status_code == 200, beat.text
        if end == "release":
            assert agent.post(f"/api/jobs/{job_id}/release", json=owner).status_code == 200
        else:
            failed = agent.post(
                f"/api/jobs/{job_id}/fail", json={**owner, "reason": "x", "retryable": False}
            )
            assert failed.status_code == 200 and failed.json()["status"] == "failed"
            assert admin.post(f"/api/jobs/{job_id}/retry").status_code == 200
        again = _claim(agent, queue)
        assert again["id"] == job_id and again["lease_id"] != first["lease_id"]
        workers = admin.get("/api/workers").json()["workers"]
        [me] = [w for w in workers if w["worker_id"] == "agent-1"]
        assert job_id in me["current_jobs"]
        assert me["progress"] == {}, "the ended claim's progress was kept"
        done = agent.post(
            f"/api/jobs/{job_id}/result",
            json={"worker_id": "agent-1", "lease_id": again["lease_id"], "result": None},
        )
        assert done.status_code == 200


def test_listing_waits_for_a_flush_another_thread_began(tmp_path: Path) -> None:
    """An agent seen before `GET /api/workers` is listed even while the hub's periodic
    flush is writing its last-seen time (the listing's own flush found nothing left to
    write and read the store before that write ended: the agent was missing)."""
    storage = SQLiteStorage(str(tmp_path / "hub.db"))
    storage.migrate()
    store = storage.hub_store()
    store.migrate()
    registry = Registry(store, storage, lease_ms=30_000)
    registry.seen("agent-1", storage.now())
    holder = apsw.Connection(str(tmp_path / "hub.db"))
    holder.execute("BEGIN IMMEDIATE")  # the periodic flush's write waits behind this
    periodic = threading.Thread(target=registry.flush, daemon=True)
    periodic.start()
    time.sleep(0.3)  # it has taken the dirty times and waits for the write lock
    listed: list[list[str]] = []

    def listing() -> None:
        registry.flush()
        listed.append([record.worker_id for record in store.list_workers()])

    reader = threading.Thread(target=listing, daemon=True)
    reader.start()
    time.sleep(0.3)
    holder.execute("ROLLBACK")
    periodic.join(30)
    reader.join(30)
    holder.close()
    storage.close()
    assert listed == [["agent-1"]]
