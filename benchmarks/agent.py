"""Remote agents through a real hub: `python -m benchmarks.agent [--jobs N] [--idle S] [--drain N]`.

Measures, in one run on a temporary folder:
- enqueue (`POST /api/jobs`) -> handler start on an idle agent (the `stamp`
  job type computes it from the enqueuer's clock; same machine): p50 and p99;
- an idle agent's requests (counted by a pass-through proxy) and CPU use;
- draining `noop` jobs through the hub with 4 started agents (from the batch enqueue
  to the last completion), against one local `Worker` (4 threads) on its own store.
`--compare` measures only the drains, for each `--code NAME=PATH` checkout in turn
(baselines in the same run): 4 agents x concurrency 4 through one hub against one
`jobcore run --concurrency 4` on its own store, with the jobs arriving while they wait
and from a backlog, on SQLite and (`--postgres URL`) PostgreSQL; jobs/s and CPU ms per job.
Targets (issue 10): p50 <= 20 ms, p99 <= 100 ms; idle <= 1 request / 25 s and < 1% of a core.
Nothing is asserted; the targets are reported as met or not.
"""

from __future__ import annotations

import argparse
import contextlib
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


CODE: dict[str, str] = {}  # `--code NAME=PATH`: the checkout (and its plugins) to run


def _env(code: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBCORE_")}
    if code is not None:  # run another checkout's code (baselines in the same run)
        env["PYTHONPATH"] = os.pathsep.join([code, os.path.join(code, "plugins"), str(ROOT)])
    else:
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
    def __init__(self, tmp: Path, db: str | None = None, code: str | None = None) -> None:
        self.db = db or str(tmp / "hub.db")
        self.code = code
        self._reader: Any = None  # a Queue on the hub's store, for `completed`
        self.url = f"http://127.0.0.1:{_port()}"
        self.tmp = tmp
        port = self.url.rsplit(":", 1)[1]
        self.proc = subprocess.Popen(
            [*JOBCORE, "--db", self.db, "serve", "--host", "127.0.0.1", "--port", port],
            env=_env(code),
            stdout=subprocess.DEVNULL,
            stderr=open(tmp / "hub.log", "wb"),  # noqa: SIM115
        )
        deadline = time.time() + 120  # a loaded machine starts it slowly
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
            args, env=_env(self.code), capture_output=True, text=True, check=True
        ).stdout.strip()

    def agent(
        self, worker_id: str, url: str | None = None, concurrency: int = 4
    ) -> subprocess.Popen[bytes]:
        token_file = self.tmp / f"token-{worker_id}"
        if not token_file.exists():
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
            env=_env(self.code),
            stdout=subprocess.DEVNULL,
            stderr=open(self.tmp / f"agent-{worker_id}.log", "wb"),
        )

    def registered(self, worker_id: str, timeout: float = 120) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            workers = self.http.get("/api/workers").json()["workers"]
            if any(w["worker_id"] == worker_id for w in workers):
                return
            time.sleep(0.05)
        raise RuntimeError(f"agent {worker_id} did not register")

    def completed(self) -> int:
        """Completed jobs, read from the hub's store by this process (as `drain_worker`
        reads its worker's): asking the hub (`/api/stats` ten times a second) charged the
        fleet the stats' queries, 13% of the hub's samples in a 16-agent-slot drain."""
        from jobcore import Queue

        if self._reader is None:
            self._reader = Queue(self.db)
        return self._reader.storage.count_by_status().get("completed", 0)

    def close(self) -> None:
        self.http.close()
        if self._reader is not None:
            self._reader.close()
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


def drain_local(tmp: Path, n: int) -> float:
    """Jobs per second for one local worker (4 threads, in this process) on its own store."""
    from jobcore import Queue, Worker

    with Queue(str(tmp / "local.db")) as queue:
        queue.enqueue_many("noop", [{} for _ in range(n)])
        started = time.perf_counter()
        Worker(queue, concurrency=4, until_empty=True).run()
        return n / (time.perf_counter() - started)


def _cpu_of(procs: list[subprocess.Popen[bytes]]) -> float:
    total = 0.0
    for proc in procs:
        with contextlib.suppress(OSError):  # exited already
            total += _cpu_seconds(proc.pid)
    return total


def _enqueue_hub(hub: Hub, n: int) -> None:
    for start in range(0, n, 1000):
        batch = [{"type": "noop", "payload": {}} for _ in range(min(1000, n - start))]
        hub.http.post("/api/jobs/batch", json={"jobs": batch}, timeout=120).raise_for_status()


def drain_fleet(
    tmp: Path, n: int, *, backlog: bool, db: str | None, code: str | None, agents: int = 4
) -> dict[str, float]:
    """4 agents (concurrency 4) draining `n` noop jobs through one hub: jobs per second, and
    CPU seconds per 1000 jobs of the hub and the agents together.

    `backlog`: the jobs are enqueued before the agents start (clock from their start);
    else the agents wait first and the jobs arrive while they do (clock from the enqueue).
    """
    hub = Hub(tmp, db=db, code=code)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        if backlog:
            _enqueue_hub(hub, n)
            for i in range(agents):  # tokens first: starting them is part of the clock
                (tmp / f"token-bench-drain-{i}").write_text(
                    hub.token(f"agent-bench-drain-{i}", "agent", f"bench-drain-{i}")
                )
        cpu0 = _cpu_of([hub.proc])
        started = time.perf_counter()
        procs = [hub.agent(f"bench-drain-{i}") for i in range(agents)]
        if not backlog:
            for i in range(agents):
                hub.registered(f"bench-drain-{i}")
            time.sleep(1.0)  # every agent is long-polling
            cpu0 = _cpu_of([hub.proc, *procs])
            started = time.perf_counter()
            _enqueue_hub(hub, n)
        while hub.completed() < n:
            time.sleep(0.1)
        elapsed = time.perf_counter() - started
        cpu = _cpu_of([hub.proc, *procs]) - cpu0
    finally:
        for proc in procs:
            _stop(proc)
        hub.close()
    return {"jobs_per_s": n / elapsed, "cpu_ms_per_job": cpu / n * 1000}


def drain_worker(
    tmp: Path, n: int, *, backlog: bool, db: str | None, code: str | None
) -> dict[str, float]:
    """One local `jobcore run --concurrency 4` draining `n` noop jobs on its own store."""
    from jobcore import Queue

    db = db or str(tmp / "local.db")
    with Queue(db) as queue:
        if backlog:
            queue.enqueue_many("noop", [{} for _ in range(n)])
        args = [*JOBCORE, "--db", db, "run", "--concurrency", "4"]
        started = time.perf_counter()
        proc = subprocess.Popen(
            [*args, "--until-empty"] if backlog else args,
            env=_env(code),
            stdout=subprocess.DEVNULL,
            stderr=open(tmp / "worker.log", "wb"),  # noqa: SIM115
        )
        try:
            if backlog:
                _, _, usage = os.wait4(proc.pid, 0)  # its CPU, read as it is reaped
                proc.returncode = 0
            else:
                time.sleep(2.0)  # started and waiting
                started = time.perf_counter()
                for start in range(0, n, 1000):
                    queue.enqueue_many("noop", [{} for _ in range(min(1000, n - start))])
                while queue.storage.count_by_status().get("completed", 0) < n:
                    time.sleep(0.05)
            elapsed = time.perf_counter() - started
            cpu = usage.ru_utime + usage.ru_stime if backlog else _cpu_of([proc])
        finally:
            if proc.poll() is None:
                _stop(proc)
    return {"jobs_per_s": n / elapsed, "cpu_ms_per_job": cpu / n * 1000}


def _folder(path: Path) -> Path:
    path.mkdir()
    return path


def _pg_db(url: str) -> str:
    """A fresh schema on the PostgreSQL server `url` (a store of its own per measurement)."""
    import secrets

    return f"{url}{'&' if '?' in url else '?'}schema=bench_{secrets.token_hex(4)}"


def compare(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Fleet vs local worker, each code (`--code`) in turn, `--rounds` times, one table."""
    rows: list[dict[str, Any]] = []
    codes = list(CODE.items()) or [("this", None)]
    stores = ["sqlite"] + (["postgres"] if args.postgres else [])
    for round_ in range(args.rounds):
        for store in stores:
            for mode in ("arriving", "backlog"):
                backlog = mode == "backlog"
                n = args.drain if backlog else args.arriving
                for name, path in codes if round_ % 2 == 0 else codes[::-1]:
                    with tempfile.TemporaryDirectory(dir=Path.home()) as folder:
                        tmp = Path(folder)
                        db = _pg_db(args.postgres) if store == "postgres" else None
                        fleet = drain_fleet(tmp, n, backlog=backlog, db=db, code=path)
                    with tempfile.TemporaryDirectory(dir=Path.home()) as folder:
                        tmp = Path(folder)
                        db = _pg_db(args.postgres) if store == "postgres" else None
                        local = drain_worker(tmp, n, backlog=backlog, db=db, code=path)
                    row = {
                        "round": round_,
                        "store": store,
                        "mode": mode,
                        "code": name,
                        "jobs": n,
                        "fleet_jobs_per_s": round(fleet["jobs_per_s"], 1),
                        "fleet_cpu_ms_per_job": round(fleet["cpu_ms_per_job"], 3),
                        "local_jobs_per_s": round(local["jobs_per_s"], 1),
                        "local_cpu_ms_per_job": round(local["cpu_ms_per_job"], 3),
                        "ratio": round(fleet["jobs_per_s"] / local["jobs_per_s"], 3),
                    }
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200, help="latency samples")
    parser.add_argument("--idle", type=float, default=60.0, help="idle seconds measured")
    parser.add_argument("--drain", type=int, default=2000, help="noop jobs drained")
    parser.add_argument(
        "--compare",
        action="store_true",
        help="only the drains: 4 agents x 4 through a hub vs `jobcore run --concurrency 4`, "
        "jobs arriving and from a backlog, for each --code",
    )
    parser.add_argument("--arriving", type=int, default=2000, help="--compare: jobs arriving")
    parser.add_argument("--rounds", type=int, default=1, help="--compare: rounds (alternating)")
    parser.add_argument(
        "--code",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="--compare: a checkout to measure (repeatable; e.g. base=/work/main)",
    )
    parser.add_argument("--postgres", metavar="URL", help="--compare: also on this PostgreSQL")
    args = parser.parse_args(argv)
    if args.compare:
        for item in args.code:
            name, _, path = item.partition("=")
            CODE[name] = path
        return {"rows": compare(args)}
    with tempfile.TemporaryDirectory(dir=Path.home()) as folder:
        tmp = Path(folder)
        hub = Hub(tmp)
        try:
            p50, p99 = latency(hub, args.jobs)
            requests, cpu = idle(hub, args.idle)
        finally:
            hub.close()
        # on a hub of its own: the idle agent's proxy above leaves its long-poll open at the
        # hub, which then hands jobs to that gone agent (they wait out a lease)
        remote = (
            drain_fleet(_folder(tmp / "drain"), args.drain, backlog=False, db=None, code=None)[
                "jobs_per_s"
            ]
            if args.drain
            else float("nan")
        )
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
