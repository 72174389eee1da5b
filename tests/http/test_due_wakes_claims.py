"""A job that becomes due (a delay, a retry's backoff) reaches a claim already waiting for it.

The hub knows when the earliest scheduled job is due and tries its waiting
claims again then, on either store: a long-poll answers within moments of
the job's `run_at`, not when its `wait` runs out.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hubproc import Hub, jobcore

LATE = 0.6  # seconds past run_at a waiting claim may answer (~0.1 s; slack for a loaded box)


@pytest.fixture
def clients(store_db: Path | str, tmp_path: Path) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    hub = Hub(store_db, "--lease", "30s", logs=tmp_path)
    admin_token = jobcore(store_db, "tokens", "create", "--name", "a", "--scope", "admin").stdout
    agent_token = jobcore(
        store_db, "tokens", "create", "--name", "w", "--scope", "agent", "--agent", "w1"
    ).stdout
    admin, agent = hub.client(admin_token.strip()), hub.client(agent_token.strip())
    try:
        yield admin, agent
    finally:
        admin.close()
        agent.close()
        assert hub.terminate() == 0, hub.output()


def _waiting_claim(agent: httpx.Client, wait: float = 20) -> tuple[dict[str, Any], float]:
    """Claim with a long-poll; the job and the monotonic time the answer came."""
    answer = agent.post("/api/jobs/claim", json={"worker_id": "w1", "wait": wait})
    came = time.monotonic()
    assert answer.status_code == 200, (answer.status_code, answer.text)
    job: dict[str, Any] = answer.json()
    return job, came


def test_a_retried_job_reaches_the_waiting_claim_when_its_backoff_ends(
    clients: tuple[httpx.Client, httpx.Client],
) -> None:
    admin, agent = clients
    enqueued = admin.post("/api/jobs", json={"type": "noop", "max_attempts": 3}).json()
    job, _ = _waiting_claim(agent, wait=0)
    assert job["id"] == enqueued["id"]
    failed = agent.post(
        f"/api/jobs/{job['id']}/fail",
        json={"worker_id": "w1", "lease_id": job["lease_id"], "reason": "x", "retry_in": 1},
    )
    assert failed.status_code == 200 and failed.json()["status"] == "scheduled", failed.text
    due = time.monotonic() + 1.0  # run_at = the store's now + 1 s, at about this moment
    again, came = _waiting_claim(agent)
    assert again["id"] == job["id"] and again["attempts"] == 2
    assert came - due < LATE, f"answered {came - due:.2f} s after the job was due"


def test_a_delayed_job_reaches_the_waiting_claim_when_due(
    clients: tuple[httpx.Client, httpx.Client],
) -> None:
    admin, agent = clients
    enqueued = admin.post("/api/jobs", json={"type": "noop", "delay": 2})
    due = time.monotonic() + 2.0
    assert enqueued.status_code == 201 and enqueued.json()["status"] == "scheduled"
    job, came = _waiting_claim(agent)
    assert job["id"] == enqueued.json()["id"]
    assert came - due < LATE, f"answered {came - due:.2f} s after the job was due"
