"""Load on loopback: 50 producers and 8 agents, a `kill -9` of the hub in the middle.

Afterwards every job is completed exactly once (one `completed` attempt in its
history) and no acknowledged enqueue is lost; agents retry their reports until
the restarted hub answers, and those repeats are idempotent.
"""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from hubproc import Hub
from testenv import subprocess_env

PRODUCERS = 50
PER_PRODUCER = 40
AGENTS = 8


def persist(call: Any, stop: threading.Event, deadline: float) -> httpx.Response:
    """Repeat a request until the hub answers (it may be down for a moment)."""
    while time.monotonic() < deadline and not stop.is_set():
        try:
            return call()
        except httpx.TransportError:
            time.sleep(0.05)
    raise AssertionError("the hub did not answer in time")


@pytest.mark.slow
def test_many_producers_and_agents_across_a_hub_crash(tmp_path: Path) -> None:
    db = tmp_path / "load.db"
    env = subprocess_env(JOBCORE_HTTP_TIMEOUT_CHECK_INTERVAL="0.2")
    hub = Hub(db, "--lease", "2s", "--insecure-no-auth", env=env)
    url = hub.url
    deadline = time.monotonic() + 240
    stop = threading.Event()
    run = uuid.uuid4().hex[:6]
    acknowledged: dict[str, str] = {}  # idempotency key -> job id
    lock = threading.Lock()

    def producer(index: int) -> None:
        with httpx.Client(base_url=url, timeout=30) as client:
            for n in range(PER_PRODUCER):
                key = f"{run}-{index}-{n}"
                body = {"type": "noop", "queue": "load", "idempotency_key": key}
                answer = persist(lambda b=body: client.post("/api/jobs", json=b), stop, deadline)
                assert answer.status_code in (200, 201), answer.text
                with lock:
                    acknowledged[key] = answer.json()["id"]

    producing_done = threading.Event()

    def agent(index: int) -> int:
        worker = f"load-agent-{index}"
        reported = 0
        with httpx.Client(base_url=url, timeout=30) as client:
            while time.monotonic() < deadline:
                try:
                    answer = client.post(
                        "/api/jobs/claim",
                        json={"worker_id": worker, "queues": ["load"], "max_jobs": 5, "wait": 0.5},
                    )
                except httpx.TransportError:
                    time.sleep(0.05)
                    continue
                if answer.status_code == 204:
                    if producing_done.is_set() and _settled(client):
                        return reported
                    continue
                for job in answer.json():
                    report = {"worker_id": worker, "lease_id": job["lease_id"], "result": index}
                    done = persist(
                        lambda j=job, r=report: client.post(f"/api/jobs/{j['id']}/result", json=r),
                        stop,
                        deadline,
                    )
                    assert done.status_code in (200, 409), done.text  # 409: lease lost meanwhile
                    reported += 1
        return reported

    with ThreadPoolExecutor(PRODUCERS + AGENTS) as pool:
        agents = [pool.submit(agent, i) for i in range(AGENTS)]
        producers = [pool.submit(producer, i) for i in range(PRODUCERS)]
        time.sleep(1.0)
        hub.kill()  # kill -9 in the middle
        hub = Hub(db, "--lease", "2s", "--insecure-no-auth", env=env, port=hub.port)
        for future in producers:
            future.result(240)
        producing_done.set()
        for future in agents:
            future.result(240)
    try:
        assert len(acknowledged) == PRODUCERS * PER_PRODUCER
        with httpx.Client(base_url=hub.url, timeout=30) as client:
            jobs = _all_jobs(client)
            by_key: dict[str, list[dict[str, Any]]] = {}
            for job in jobs:
                by_key.setdefault(job["idempotency_key"], []).append(job)
            for key, job_id in acknowledged.items():
                assert job_id in {job["id"] for job in by_key[key]}, key  # nothing lost
            for job in jobs:
                assert job["status"] == "completed", job
                outcomes = [entry["outcome"] for entry in job["history"]]
                assert outcomes.count("completed") == 1, outcomes
    finally:
        assert hub.terminate() == 0


def _settled(client: httpx.Client) -> bool:
    open_jobs = client.get(
        "/api/jobs", params={"queue": "load", "status": "scheduled,pending,claimed", "limit": 1}
    )
    return open_jobs.status_code == 200 and not open_jobs.json()["jobs"]


def _all_jobs(client: httpx.Client) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"queue": "load", "limit": 1000}
        if cursor:
            params["cursor"] = cursor
        page = client.get("/api/jobs", params=params).json()
        jobs.extend(page["jobs"])
        cursor = page["next_cursor"]
        if cursor is None:
            return jobs
