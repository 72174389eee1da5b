"""Agents behind a fault-injecting proxy: no job lost, none completed twice, no live-lease overlap."""

from __future__ import annotations

import itertools
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from faultproxy import FaultProxy
from hubenv import Agent, Hub, wait_until

from jobcore.timeutil import parse_time

pytest.importorskip("fastapi")

JOBS = 1000
AGENTS = 3


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[Hub]:
    hub = Hub(tmp_path, lease="4s")
    yield hub
    hub.close()


@pytest.mark.stress
@pytest.mark.timeout(240)
def test_three_agents_through_a_faulty_network_lose_and_double_nothing(
    hub: Hub, tmp_path: Path
) -> None:
    proxy = FaultProxy(
        hub.url,
        seed=7,
        reset=0.03,
        bad_gateway=0.03,
        slow=0.05,
        drop_after=0.03,
        slow_seconds=(0.05, 0.4),
    )
    log = tmp_path / "stamps"
    agents: list[Agent] = []
    try:
        batch = [{"type": "stamp", "payload": {"log": str(log)}} for _ in range(JOBS)]
        response = hub.admin.post("/api/jobs/batch", json={"jobs": batch}, timeout=120)
        assert response.status_code in (200, 201), response.text
        ids = [job["id"] for job in response.json()["jobs"]]
        started = time.monotonic()
        for n in range(AGENTS):
            agents.append(
                Agent(
                    hub,
                    f"f{n}",
                    hub_url=proxy.url,
                    extra=("--concurrency", "4"),
                    env_extra={
                        "JOBCORE_AGENT_MAX_BACKOFF": "1s",
                        "JOBCORE_AGENT_REQUEST_TIMEOUT": "5s",
                    },
                )
            )

        def all_finished() -> bool:
            counts = hub.admin.get("/api/stats").json()["counts"]
            return counts.get("completed", 0) + counts.get("failed", 0) >= JOBS

        wait_until(all_finished, timeout=180)
        elapsed = time.monotonic() - started
    finally:
        for agent in agents:
            agent.kill()
        proxy.close()
    print(f"{JOBS} jobs through the faulty proxy in {elapsed:.1f}s; faults {dict(proxy.faults)}")
    assert all(proxy.faults[kind] > 0 for kind in ("reset", "bad_gateway", "slow", "drop_after"))
    # read-ahead jobs were started through the faulty network too (`start` report items)
    assert proxy.items["start"] > 0, proxy.items

    counts = hub.admin.get("/api/stats").json()["counts"]
    assert counts.get("completed") == JOBS, counts  # none lost, none failed

    runs: dict[str, list[tuple[int, str, int, int]]] = defaultdict(list)
    for line in log.read_text().splitlines():
        job_id, attempt, worker, start, end = line.split()
        runs[job_id].append((int(attempt), worker, int(start), int(end)))
    assert set(runs) == set(ids)  # every job ran to completion at least once
    rerun = [job_id for job_id, items in runs.items() if len(items) > 1]
    for job_id in [*rerun, *ids[:20]]:
        job = hub.job(job_id)
        outcomes = [entry["outcome"] for entry in job["attempts_detail"]]
        assert outcomes.count("completed") == 1, (job_id, outcomes)  # completed exactly once
        ended = {entry["attempt"]: entry.get("ended_at") for entry in job["attempts_detail"]}
        items = sorted(runs[job_id], key=lambda item: item[2])
        for earlier, later in itertools.pairwise(items):
            if later[2] < earlier[3]:  # two runs overlapped in time...
                # ...only allowed once the hub had ended the earlier run's lease
                end_of_lease = ended.get(earlier[0])
                assert end_of_lease is not None, (job_id, items, job["attempts_detail"])
                assert parse_time(end_of_lease) <= later[2] + 5, (job_id, items)
    assert len(rerun) <= JOBS // 10, f"{len(rerun)} jobs ran more than once"
