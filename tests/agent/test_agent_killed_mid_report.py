"""An agent killed (SIGKILL) while a batched report is in flight: the hub records the batch
its client never heard back from; the restarted agent resends the outbox, the hub answers
`already`, the outbox is emptied and every job completed exactly once."""

from __future__ import annotations

import signal
import sqlite3
from collections import Counter
from pathlib import Path

import pytest
from faultproxy import FaultProxy
from hubenv import Agent, Hub, wait_until

pytest.importorskip("fastapi")

pytestmark = pytest.mark.timeout(180)

JOBS = 12


def _outbox_rows(agent: Agent) -> int:
    with sqlite3.connect(agent.cache_dir / "outbox.db") as db:
        (count,) = db.execute("SELECT count(*) FROM outcomes").fetchone()
    return int(count)


def test_killed_mid_report_then_restarted_delivers_each_outcome_once(tmp_path: Path) -> None:
    hub = Hub(tmp_path, lease="30s")
    proxy = FaultProxy(hub.url)
    agent: Agent | None = None
    try:
        log = tmp_path / "log"
        agent = Agent(hub, "a1", hub_url=proxy.url, extra=("--concurrency", "2"))
        wait_until(agent.registered)
        proxy.delays["reports"] = 3.0  # every batch waits in the proxy, then reaches the hub
        jobs = [{"type": "stamp", "payload": {"log": str(log)}} for _ in range(JOBS)]
        ids = [
            j["id"] for j in hub.admin.post("/api/jobs/batch", json={"jobs": jobs}).json()["jobs"]
        ]
        wait_until(lambda: (agent.cache_dir / "outbox.db").exists() and _outbox_rows(agent) > 0)
        agent.signal(signal.SIGKILL)  # outcomes saved, their report on its way
        agent.wait()
        left = _outbox_rows(agent)
        assert left > 0
        proxy.delays.clear()
        agent.restart()
        for job_id in ids:  # the jobs it held run again only once their leases lapse
            hub.wait_status(job_id, "completed", timeout=90)
        wait_until(lambda: _outbox_rows(agent) == 0)
        runs = Counter(line.split()[0] for line in log.read_text().splitlines())
        for job_id in ids:
            job = hub.job(job_id)
            outcomes = [a["outcome"] for a in job["attempts_detail"]]
            assert outcomes.count("completed") == 1, outcomes
            # a job that ran to its outcome was not run again
            if runs[job_id] > 1:
                assert outcomes[0] in ("reclaimed", "released"), (job_id, outcomes)
        assert "Traceback" not in agent.log()
    finally:
        if agent is not None:
            agent.kill()
        proxy.close()
        hub.close()
