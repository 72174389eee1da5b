"""Remote agents through a real hub: `python -m benchmarks.agent [--jobs N] [--idle S] [--drain N]`.

Measures, in one run on a temporary folder:
- enqueue (`POST /api/jobs`) -> handler start on an idle agent (the `stamp`
  job type computes it from the enqueuer's clock; same machine): p50 and p99;
- an idle agent's requests (counted by a pass-through proxy) and CPU use;
- draining `noop` jobs through the hub with 4 started agents (from the batch enqueue
  to the last completion), against one local `Worker` (4 threads) on its own store.
Targets (issue 10): p50 <= 20 ms, p99 <= 100 ms; idle <= 1 request / 25 s and < 1% of a core.
Nothing is asserted; the targets are reported as met or not.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "agent"))  # the pass-through proxy

from faultproxy import FaultProxy  # noqa: E402

JOBCORE = [sys.executable, "-m", "jobcore"]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBCORE_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env["JOBCORE_PLUGINS"] = "benchmarks.plugin"
    return env


def _port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _percentiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered), ordered[
        min(len(ordered) - 1, round(0.99 * len(ordered)) - 1)
    ]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class Hub:
    def __init__(self, tmp: Path) -> None:
        self.db = str(tmp / "hub.db")
        self.url = f"http://127.0.0.1:{_port()}"
        self.tmp = tmp
        port = self.url.rsplit(":", 1)[1]
        self.proc = subprocess.Popen(
            [*JOBCORE, "--db", self.db, "serve", "--host", "127.0.0.1", "--port", port],
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=open(tmp / "hub.log", "wb"),  # noqa: SIM115
        )
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                if httpx.get(f"{self.url}/api/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        admin = self.token("bench-admin", "admin")
        self.http = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {admin}"})

    def token(self, name: str, scope: str, agent: str | None = None) -> str:
        args = [*JOBCORE, "--db", self.db, "tokens", "create", "--name", name, "--scope", scope]
        if agent:
            args += ["--agent", agent]
        return subprocess.run(
            args, env=_env(), capture_output=True, text=True, check=True
        ).stdout.strip()

    def agent(
        self, worker_id: str, url: str | None = None, concurrency: int = 4
    ) -> subprocess.Popen[bytes]:
        token_file = self.tmp / f"token-{worker_id}"
        token_file.write_text(self.token(f"agent-{worker_id}", "agent", worker_id))
        return subprocess.Popen(
            [
                *JOBCORE,
                "agent",
                "--hub",
                url or self.url,
                "--token-file",
                str(token_file),
                "--worker-id",
                worker_id,
                "--cache-dir",
                str(self.tmp / f"cache-{worker_id}"),
                "--concurrency",
                str(concurrency),
            ],
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=open(self.tmp / f"agent-{worker_id}.log", "wb"),
        )

    def registered(self, worker_id: str, timeout: float = 30) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            workers = self.http.get("/api/workers").json()["workers"]
            if any(w["worker_id"] == worker_id for w in workers):
                return
            time.sleep(0.05)
        raise RuntimeError(f"agent {worker_id} did not register")

    def completed(self) -> int:
        counts: dict[str, int] = self.http.get("/api/stats").json()["counts"]
        return counts.get("completed", 0)

    def close(self) -> None:
        self.http.close()
        _stop(self.proc)


def latency(hub: Hub, jobs: int) -> tuple[float, float]:
    agent = hub.agent("bench-latency")
    try:
        hub.registered("bench-latency")
        time.sleep(1.0)  # its first long-poll is waiting
        ids = []
        for i in range(jobs):
            time.sleep(0.05 + (i % 7) * 0.01)  # spaced: each job meets an idle agent
            body = {"type": "stamp", "payload": {"t0": time.time()}}
            ids.append(hub.http.post("/api/jobs", json=body).json()["id"])
        deadline = time.time() + 60
        while time.time() < deadline and hub.completed() < jobs:
            time.sleep(0.1)
        values = [
            hub.http.get(f"/api/jobs/{job_id}").json()["result"]["latency_ms"] for job_id in ids
        ]
    finally:
        _stop(agent)
    return _percentiles(values)


def idle(hub: Hub, seconds: float) -> tuple[float, float]:
    """(requests per 25 s, % of a core) of an agent with nothing to do, after it settled."""
    proxy = FaultProxy(hub.url)
    agent = hub.agent("bench-idle", url=proxy.url)
    try:
        hub.registered("bench-idle")
        time.sleep(2.0)
        before_requests = sum(proxy.requests.values())
        before_cpu = _cpu_seconds(agent.pid)
        time.sleep(seconds)
        requests = sum(proxy.requests.values()) - before_requests
        cpu = (_cpu_seconds(agent.pid) - before_cpu) / seconds * 100
    finally:
        _stop(agent)
        proxy.close()
    return requests / seconds * 25, cpu


def drain_agents(hub: Hub, n: int, agents: int = 4) -> float:
    """Jobs per second draining `n` noop jobs through the hub with `agents` started, idle agents."""
    procs = [hub.agent(f"bench-drain-{i}") for i in range(agents)]
    try:
        for i in range(agents):
            hub.registered(f"bench-drain-{i}")
        time.sleep(1.0)  # every agent is long-polling
        done_before = hub.completed()
        started = time.perf_counter()
        for start in range(0, n, 1000):
            batch = [{"type": "noop", "payload": {}} for _ in range(min(1000, n - start))]
            hub.http.post("/api/jobs/batch", json={"jobs": batch}, timeout=120).raise_for_status()
        while hub.completed() - done_before < n:
            time.sleep(0.2)  # `GET /api/stats` is not free: polling it faster slows the hub
        elapsed = time.perf_counter() - started
    finally:
        for proc in procs:
            _stop(proc)
    return n / elapsed


def drain_local(tmp: Path, n: int) -> float:
    """Jobs per second for one local worker (4 threads, in this process) on its own store."""
    from jobcore import Queue, Worker

    with Queue(str(tmp / "local.db")) as queue:
        queue.enqueue_many("noop", [{} for _ in range(n)])
        started = time.perf_counter()
        Worker(queue, concurrency=4, until_empty=True).run()
        return n / (time.perf_counter() - started)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200, help="latency samples")
    parser.add_argument("--idle", type=float, default=60.0, help="idle seconds measured")
    parser.add_argument("--drain", type=int, default=2000, help="noop jobs drained")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=Path.home()) as folder:
        tmp = Path(folder)
        hub = Hub(tmp)
        try:
            p50, p99 = latency(hub, args.jobs)
            requests, cpu = idle(hub, args.idle)
            remote = drain_agents(hub, args.drain) if args.drain else float("nan")
        finally:
            hub.close()
        local = drain_local(tmp, args.drain) if args.drain else float("nan")
    results = {
        "latency_p50_ms": round(p50, 1),
        "latency_p99_ms": round(p99, 1),
        "idle_requests_per_25s": round(requests, 2),
        "idle_cpu_percent": round(cpu, 2),
        "drain_4_agents_jobs_per_s": round(remote, 1),
        "drain_local_worker_jobs_per_s": round(local, 1),
    }
    checks = {
        "latency p50 <= 20 ms": p50 <= 20,
        "latency p99 <= 100 ms": p99 <= 100,
        "idle <= 1 request / 25 s": requests <= 1,
        "idle CPU < 1%": cpu < 1,
    }
    print(json.dumps(results, indent=2))
    for name, met in checks.items():
        print(f"{'met' if met else 'MISSED':>6}  {name}")
    if args.drain:
        print(f"        4 agents through the hub / local worker: {remote / local:.2f}x")
    return results


if __name__ == "__main__":
    main()
