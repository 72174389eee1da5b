"""Rate limits across a real agent and a worker (DESIGN §16): one `jobcore agent` through
a real hub and one `jobcore run` worker on the same SQLite store, each serving a queue of
its own, share a job type's rate; from the jobs' `claimed_at`, no window of the period
holds more, whoever claimed."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
from faultproxy import FaultProxy
from hubenv import JOBCORE, RATES, Agent, Hub, env, jobcore, wait_until

from jobcore.testing import make_queue

pytest.importorskip("fastapi")

pytestmark = pytest.mark.timeout(300)


def test_an_agent_and_a_worker_share_one_rate(rates_hub: Hub, tmp_path: Path) -> None:
    hub = rates_hub
    rate, period_ms, total = 5, 500, 30
    jobcore(hub.db, "limit", "--type", "unrated", "--rate", f"{rate}/{period_ms}ms")
    ids = [
        hub.enqueue("unrated", {}, queue=("by_agent", "by_worker")[n % 2])["id"]
        for n in range(total)
    ]
    agent = Agent(hub, "a0", env_extra=RATES, extra=("--queue", "by_agent"))
    log = (tmp_path / "worker.log").open("w")
    worker = subprocess.Popen(
        [*JOBCORE, "--db", hub.db, "run", "--concurrency", "4", "--queue", "by_worker"],
        stdout=subprocess.DEVNULL,
        stderr=log,
        env=env(**RATES),
    )
    try:
        wait_until(lambda: all(hub.job(i)["status"] == "completed" for i in ids), timeout=240)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)
        log.close()
        agent.kill()
    queue = make_queue(hub.db)
    try:
        jobs = queue.storage.list_jobs(types=["unrated"], limit=1000)
    finally:
        queue.close()
    times = sorted(job.claimed_at for job in jobs if job.claimed_at is not None)
    assert len(times) == total
    for start, at in enumerate(times):
        assert sum(1 for t in times[start:] if t < at + period_ms) <= rate, times
    by = {hub.job(i)["attempts_detail"][-1]["worker"] for i in ids}
    assert "a0" in by and len(by) == 2, by  # both claimed, under the one rate


def test_an_agents_retry_after_with_limit_holds_the_rate_at_the_hub(rates_hub: Hub) -> None:
    hub = rates_hub
    hub = rates_hub
    jobcore(hub.db, "limit", "--type", "pushy", "--rate", "5/1s")
    first = hub.enqueue("pushy", {"push": 3.0})["id"]
    agent = Agent(hub, "a0", env_extra=RATES)
    try:
        wait_until(lambda: hub.job(first)["status"] == "scheduled", timeout=60)
        queue = make_queue(hub.db)
        pushed_at = queue.storage.now()
        later = [hub.enqueue("pushy", {})["id"] for _ in range(3)]
        wait_until(lambda: all(hub.job(i)["status"] == "completed" for i in later), timeout=60)
        claimed = [queue.storage.get(i).claimed_at for i in later]  # type: ignore[union-attr]
        queue.close()
    finally:
        agent.kill()
    assert all(at is not None and at >= pushed_at + 2500 for at in claimed), (pushed_at, claimed)


def test_a_hold_asked_for_a_lost_claim_goes_nowhere(tmp_path: Path) -> None:
    """A handler whose lease was lost (its claim settled) raises `RetryAfter(limit=True)`:
    the hold is dropped with the claim. It stays neither in the agent's memory nor rides
    on the fail report of the job's next attempt on this agent (which would hold the
    limit though that attempt asked for nothing)."""
    hub = Hub(tmp_path, lease="4s", env_extra=RATES)
    proxy = FaultProxy(hub.url)
    try:
        jobcore(hub.db, "limit", "--type", "pushy_late", "--rate", "100/1m")
        job = hub.enqueue("pushy_late", {"push": 60.0})["id"]
        agent = Agent(hub, "a0", hub_url=proxy.url, env_extra=RATES, extra=("--concurrency", "1"))
        try:
            wait_until(lambda: hub.job(job)["status"] == "claimed", timeout=60)
            proxy.rates["bad_gateway"] = 1.0  # cut off: its heartbeats fail, its lease runs out
            wait_until(lambda: hub.job(job)["status"] == "pending", timeout=60)  # reclaimed
            proxy.rates["bad_gateway"] = 0.0
            # back: the hub says the lease is gone, the handler is asked to stop and raises
            # RetryAfter(60, limit=True); the agent claims the job again, and that fails
            wait_until(lambda: hub.job(job)["attempts"] >= 2, timeout=60)
            wait_until(lambda: hub.job(job)["status"] in ("scheduled", "failed"), timeout=60)
        finally:
            agent.kill()
        assert "lost the lease" in agent.log()
        assert "a plain failure" in str(hub.job(job)["errors"])
        [row] = [
            r for r in hub.admin.get("/api/limits").json()["limits"] if r["name"] == "pushy_late"
        ]
        assert row["held_until"] is None, row  # nothing held the limit
    finally:
        proxy.close()
        hub.close()
