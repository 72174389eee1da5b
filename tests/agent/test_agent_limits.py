"""Concurrency limits across real agents and workers (DESIGN §16): two `jobcore agent`
processes through a real hub and two `jobcore run` workers on the same SQLite store;
handlers tally how many run at once; never more than the limit, whoever claims."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hubenv import JOBCORE, Agent, Hub, env, jobcore, wait_until

pytest.importorskip("fastapi")

pytestmark = pytest.mark.timeout(300)

PLUGIN = {"JOBCORE_PLUGINS": "jobcore_limits_plugin"}


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[Hub]:
    hub = Hub(tmp_path, lease="20s", env_extra=PLUGIN)
    yield hub
    hub.close()


def _peak(tally: Path, group: str) -> dict[str, int]:
    with sqlite3.connect(tally, timeout=60) as conn:
        now, peak, runs = conn.execute(
            "SELECT now, peak, runs FROM running WHERE grp = ?", (group,)
        ).fetchone()
    return {"now": now, "peak": peak, "runs": runs}


def test_agents_and_workers_share_one_limit(hub: Hub, tmp_path: Path) -> None:
    tally = tmp_path / "tally.db"
    jobcore(hub.db, "limit", "--type", "limited", "--concurrency", "3")
    ids = [hub.enqueue("limited", {"tally": str(tally), "sleep": 0.15})["id"] for _ in range(30)]
    agents = [Agent(hub, f"a{n}", env_extra=PLUGIN) for n in range(2)]
    logs = [(tmp_path / f"worker{n}.log").open("w") for n in range(2)]
    workers = [
        subprocess.Popen(
            [*JOBCORE, "--db", hub.db, "run", "--concurrency", "4"],
            stdout=subprocess.DEVNULL,
            stderr=log,
            env=env(**PLUGIN),
        )
        for log in logs
    ]
    try:
        wait_until(lambda: all(hub.job(i)["status"] == "completed" for i in ids), timeout=240)
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            worker.wait(60)
        for log in logs:
            log.close()
        for agent in agents:
            agent.kill()
    assert _peak(tally, "limited") == {"now": 0, "peak": 3, "runs": 30}
    by = {hub.job(i)["attempts_detail"][-1]["worker"] for i in ids}
    assert {"a0", "a1"} & by, f"no agent ran a job: {by}"
