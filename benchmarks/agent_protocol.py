"""The hub's CPU per job on the agent protocol, without agents:
`python -m benchmarks.agent_protocol --code NAME=PATH ... [--jobs N] [--reps R]`.

One synthetic agent, sequential, drains `--jobs` `noop` jobs from a backlog as a
`jobcore agent` with read-ahead does: claims of 20 with `start: 0`, then per 4 jobs one
`POST /api/jobs/reports` with their 4 `start` items and the previous 4 `result` items.
Prints the hub's user+sys CPU per job for each checkout, alternating per repetition
(baselines in the same run). No agent process, so what is measured is the hub's side.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.agent import Hub, _cpu_of, _enqueue_hub

GROUP = 4  # an agent's concurrency: the starts one report carries
CLAIM = 20  # jobs per claim (free slots plus read-ahead)


def _items(jobs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    items = [{"job_id": j["id"], "lease_id": j["lease_id"], "kind": kind} for j in jobs]
    return [{**item, "result": None} for item in items] if kind == "result" else items


def _report(client: httpx.Client, items: list[dict[str, Any]]) -> None:
    answer = client.post("/api/jobs/reports", json={"worker_id": "w", "reports": items})
    answer.raise_for_status()
    states = {item["state"] for item in answer.json()["results"]}
    assert states == {"recorded"}, answer.text


def drain(code: str, n: int) -> dict[str, float]:
    """Hub CPU ms per job and requests for `n` jobs through the hub of checkout `code`."""
    with tempfile.TemporaryDirectory(dir=Path.home()) as folder:
        hub = Hub(Path(folder), code=code)
        try:
            _enqueue_hub(hub, n)
            token = hub.token("agent-w", "agent", "w")
            headers = {"Authorization": f"Bearer {token}"}
            with httpx.Client(base_url=hub.url, headers=headers, timeout=120) as client:
                body = {"worker_id": "w", "types": ["noop"]}
                client.post("/api/workers/register", json=body).raise_for_status()
                cpu0, started = _cpu_of([hub.proc]), time.perf_counter()
                done = requests = 0
                while done < n:
                    claim = {"worker_id": "w", "max_jobs": CLAIM, "wait": 0, "start": 0}
                    answer = client.post("/api/jobs/claim", json=claim)
                    requests += 1
                    jobs = answer.json() if answer.status_code == 200 else []
                    previous: list[dict[str, Any]] = []
                    for k in range(0, len(jobs), GROUP):
                        group = jobs[k : k + GROUP]
                        _report(client, _items(group, "start") + _items(previous, "result"))
                        requests += 1
                        done, previous = done + len(previous), group
                    if previous:
                        _report(client, _items(previous, "result"))
                        requests, done = requests + 1, done + len(previous)
                elapsed = time.perf_counter() - started
                cpu = _cpu_of([hub.proc]) - cpu0
            assert hub.completed() == n
        finally:
            hub.close()
    return {"hub_cpu_ms_per_job": round(cpu / n * 1000, 3), "jobs_per_s": round(n / elapsed, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", action="append", required=True, metavar="NAME=PATH")
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    codes = [tuple(item.split("=", 1)) for item in args.code]
    for rep in range(args.reps):
        for name, path in codes if rep % 2 == 0 else codes[::-1]:
            row = {"rep": rep, "code": name, "jobs": args.jobs, **drain(path, args.jobs)}
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
