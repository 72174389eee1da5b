"""The hub's own sweep after a forward step of the store's clock (issue 17 item 27), with a
remote agent holding the claim: an agent never sweeps, so only the hub's rule is at work.

Before, a step made the agent's live lease look expired and the hub's next sweep re-queued
its job (it then ran twice). Now the hub holds its sweep for one lease of real elapsed time
after it notices a step, by when the agent has heartbeated again.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hubenv import JOBCORE, Agent, Hub, env, jobcore, pause, wait_until
from shifted_clock import step

pytest.importorskip("fastapi")

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def clock(tmp_path: Path) -> Path:
    return tmp_path / "clock-offset"


@pytest.fixture
def hub(tmp_path: Path, clock: Path) -> Iterator[Hub]:
    hub = Hub(
        tmp_path,
        lease="4s",  # the hub sweeps every 2 s
        env_extra={
            "JOBCORE_PLUGINS": "jobcore_test_plugin,agent_test_plugin,shifted_clock",
            "JOBCORE_TEST_CLOCK_OFFSET": str(clock),
        },
    )
    yield hub
    hub.close()


def test_a_clock_step_does_not_make_the_hub_reclaim_a_live_agents_job(
    hub: Hub, clock: Path, tmp_path: Path
) -> None:
    started = tmp_path / "started"
    agent = Agent(hub, "a1")
    try:
        wait_until(agent.registered)
        job = hub.enqueue("sleepy", {"seconds": 60, "cooperative": True, "started": str(started)})
        wait_until(started.exists)
        # the agent misses its heartbeats while the step happens (held for 3/4 of a lease):
        # the hub's sweep comes round more than once meanwhile
        agent.signal(signal.SIGSTOP)
        try:
            step(clock, 40_000)  # ten leases ahead
            pause(3.0)
        finally:
            agent.signal(signal.SIGCONT)
        pause(3.0)  # past the hub's hold: its sweeps find the lease extended
        shown = hub.job(job["id"])
        assert (shown["status"], shown["attempts"], shown["errors"]) == ("claimed", 1, [])
        assert started.read_text().split()[1] == "1"  # it never began again
        assert "the store's clock stepped" in hub.log()
    finally:
        agent.kill()


def _claim_of(db: Path, job_id: str) -> tuple[str, str | None]:
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        status, lease_id = conn.execute(
            "SELECT status, lease_id FROM jobs WHERE id = ?", (job_id,)
        ).fetchone()
    return status, lease_id


def test_a_hub_started_right_after_a_clock_step_spares_a_live_workers_job(
    clock: Path, tmp_path: Path
) -> None:
    """The hub takes its first reading of the store's clock when it starts: a step just
    before goes unseen. Before, its first sweep re-queued the job of a live worker that
    had not heartbeat since the step; now the first sweep confirms over lease/4 + 1s."""
    db = tmp_path / "hub.db"
    plugins = {
        "JOBCORE_PLUGINS": "jobcore_test_plugin,agent_test_plugin,shifted_clock",
        "JOBCORE_TEST_CLOCK_OFFSET": str(clock),
    }
    started = tmp_path / "started"
    payload = json.dumps({"seconds": 60, "cooperative": True, "started": str(started)})
    job_id = jobcore(str(db), "enqueue", "sleepy", payload).strip()
    with open(tmp_path / "worker.log", "wb") as log:
        worker = subprocess.Popen(
            [*JOBCORE, "--db", str(db), "run", "--lease", "4s", "--concurrency", "1"],
            env=env(**plugins),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    hub: Hub | None = None
    try:
        wait_until(started.exists)
        claim = _claim_of(db, job_id)
        worker.send_signal(signal.SIGSTOP)  # its next heartbeat comes after the step
        try:
            step(clock, 40_000)  # ten leases ahead
            hub = current = Hub(tmp_path, lease="4s", env_extra=plugins)
            wait_until(lambda: "look expired" in current.log() or _claim_of(db, job_id) != claim)
        finally:
            worker.send_signal(signal.SIGCONT)
        pause(3.0)  # past the hub's confirmation (2s): the worker extended its lease first
        shown = current.job(job_id)
        assert (shown["status"], shown["lease_id"], shown["errors"]) == ("claimed", claim[1], [])
        assert started.read_text().split()[1] == "1"  # it never began again
    finally:
        worker.kill()
        worker.wait(10)
        if hub is not None:
            hub.close()
