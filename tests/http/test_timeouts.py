"""The hub ends remote claims that run too long, sweeps silent agents' leases, marks them lost."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hubproc import Hub, make_tokens
from sse import read_events
from testenv import subprocess_env, wait_for


@pytest.fixture(scope="module")
def fast_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Hub, httpx.Client]]:
    db: Path = tmp_path_factory.mktemp("fast") / "jobs.db"
    server = Hub(db, "--lease", "2s", env=subprocess_env(JOBCORE_HTTP_TIMEOUT_CHECK_INTERVAL="0.1"))
    tokens = make_tokens(server, db)
    with server.client(tokens.admin) as client:
        yield server, client
    assert server.terminate() == 0


def test_a_remote_claim_past_its_timeout_ends_even_while_it_heartbeats(
    fast_hub: tuple[Hub, httpx.Client],
) -> None:
    _, admin = fast_hub
    admin.post("/api/workers/register", json={"worker_id": "slowpoke"})
    job = admin.post(
        "/api/jobs", json={"type": "noop", "queue": "t1", "timeout": 0.6, "max_attempts": 1}
    ).json()
    claimed = admin.post("/api/jobs/claim", json={"worker_id": "slowpoke", "queues": ["t1"]}).json()
    beat = {"worker_id": "slowpoke", "lease_id": claimed["lease_id"]}
    answers = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        answer = admin.post(f"/api/jobs/{job['id']}/heartbeat", json=beat)
        assert answer.status_code == 200, answer.text
        answers.append(answer.json()["cancel_requested"])
        if answers[-1]:
            break
        time.sleep(0.1)
    assert answers[0] is False and answers[-1] is True
    ended = admin.get(f"/api/jobs/{job['id']}").json()
    assert (ended["status"], ended["last_error"]) == (
        "failed",
        "max_runtime_exceeded: timed out after 0.6s",
    )
    late = admin.post(f"/api/jobs/{job['id']}/result", json=beat)
    assert late.status_code == 409


def test_a_timed_out_attempt_with_attempts_left_is_retried(
    fast_hub: tuple[Hub, httpx.Client],
) -> None:
    _, admin = fast_hub
    admin.post("/api/workers/register", json={"worker_id": "slowpoke"})
    job = admin.post(
        "/api/jobs", json={"type": "noop", "queue": "t2", "max_runtime_ms": 300, "max_attempts": 3}
    ).json()
    admin.post("/api/jobs/claim", json={"worker_id": "slowpoke", "queues": ["t2"]})
    ended = wait_for(
        lambda: (j := admin.get(f"/api/jobs/{job['id']}").json())["status"] != "claimed" and j
    )
    assert ended["status"] in ("scheduled", "pending")
    assert ended["last_error"] == "max_runtime_exceeded: timed out after 0.3s"


def test_silent_agents_lose_their_leases_and_are_marked_lost(
    fast_hub: tuple[Hub, httpx.Client],
) -> None:
    _, admin = fast_hub
    admin.post("/api/workers/register", json={"worker_id": "ghost"})
    job = admin.post("/api/jobs", json={"type": "noop", "queue": "t3", "timeout": 3600}).json()
    assert (
        admin.post("/api/jobs/claim", json={"worker_id": "ghost", "queues": ["t3"]}).status_code
        == 200
    )

    def state() -> str:
        workers = admin.get("/api/workers").json()["workers"]
        return str(next(w for w in workers if w["worker_id"] == "ghost")["state"])

    assert state() == "active"
    back = wait_for(
        lambda: (j := admin.get(f"/api/jobs/{job['id']}").json())["status"] == "pending" and j,
        timeout=15,
    )
    assert back["attempts"] in (0, 1)
    assert wait_for(lambda: state() == "lost", timeout=15)
    hub, _ = fast_hub
    token = admin.headers["Authorization"].split()[1]
    _, events = read_events(
        hub.url,
        token,
        lambda evs: any(e.kind == "worker:lost" and e.data["worker_id"] == "ghost" for e in evs),
        last_event_id=0,
    )
    assert [e.kind for e in events if e.data.get("worker_id") == "ghost"][-1] == "worker:lost"
