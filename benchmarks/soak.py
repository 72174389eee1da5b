"""A soak through faults (issue 18): `python -m benchmarks.soak [--jobs N] [--agents 8] [--store sqlite|postgres]`.

One `jobcore serve` and `--agents` `jobcore agent --concurrency 4` processes, the
agents talking to the hub through a fault proxy (tests/agent/faultproxy.py:
connection resets, 502s, slow answers, answers dropped after the hub committed).
`--jobs` `soak` jobs (benchmarks/soak_plugin.py) of mixed lengths are enqueued
first: most 0 ms, some 10-50 ms, a few 1-3 s. Part-way through, the hub is
killed (SIGKILL) and started again on the same port and store; the agents carry on.

Afterwards the store and the per-agent run files are checked: every job completed
exactly once (one `completed` entry in its history, status completed); every job's
handler ran to its end at least once; two runs of one job overlapping in time only
once the hub had ended the earlier run's lease (its history entry `reclaimed`, ended
before the later run started); re-runs counted by the earlier attempt's outcome; no
job left pending or claimed. Reported: jobs/s (agents' start to the last completion),
the hub's RSS (VmRSS) before, peak and after, faults injected, machine load.
Nothing is asserted; problems are listed and the exit status is 1 if any.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "agent"))  # the fault proxy

from faultproxy import FaultProxy  # noqa: E402

JOBCORE = [sys.executable, "-m", "jobcore"]
PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
TOLERANCE_MS = 5  # clocks: the hub's ms timestamps against the agents' ns ones


def _env(soak_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBCORE_")}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), str(ROOT / "plugins"), env.get("PYTHONPATH", "")]
    )
    env["JOBCORE_PLUGINS"] = "benchmarks.soak_plugin"
    env["JOBCORE_SOAK_DIR"] = str(soak_dir)
    return env


def _port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def rss_kb(pid: int) -> int:
    """VmRSS of a process in kB (0 once it has exited)."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def lengths(n: int, seed: int = 1) -> list[int]:
    """Milliseconds per job: 90% 0, 9% 10-50, 1% 1000-3000."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        draw = rng.random()
        if draw < 0.01:
            out.append(rng.randint(1000, 3000))
        elif draw < 0.10:
            out.append(rng.randint(10, 50))
        else:
            out.append(0)
    return out


class Hub:
    """`jobcore serve` on a fixed port; `kill` then `start` restarts it on the same store."""

    def __init__(self, tmp: Path, db: str, lease: str) -> None:
        self.tmp, self.db, self.lease = tmp, db, lease
        self.port = _port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = _env(tmp)
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()
        self.http = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {self.token('soak-admin', 'admin')}"},
            timeout=120,
        )

    def start(self) -> float:
        """Start the hub; seconds until it answers /api/health."""
        started = time.perf_counter()
        with open(self.tmp / "hub.log", "ab") as log:
            self.proc = subprocess.Popen(
                [
                    *JOBCORE,
                    *("--db", self.db, "serve", "--host", "127.0.0.1"),
                    *("--port", str(self.port), "--lease", self.lease),
                ],
                env=self.env,
                stdout=log,
                stderr=log,
            )
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the hub exited: see {self.tmp / 'hub.log'}")
            try:
                if httpx.get(f"{self.url}/api/health", timeout=1).status_code == 200:
                    return time.perf_counter() - started
            except httpx.HTTPError:
                time.sleep(0.05)
        raise RuntimeError("the hub did not answer /api/health within 60 s")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def token(self, name: str, scope: str, agent: str | None = None) -> str:
        args = [*JOBCORE, "--db", self.db, "tokens", "create", "--name", name, "--scope", scope]
        if agent:
            args += ["--agent", agent]
        done = subprocess.run(args, env=self.env, capture_output=True, text=True, check=True)
        return done.stdout.strip()

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = self.http.get("/api/stats", timeout=10).json()["counts"]
        return counts

    def close(self) -> None:
        self.http.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_agent(hub: Hub, worker_id: str, url: str) -> subprocess.Popen[bytes]:
    token_file = hub.tmp / f"token-{worker_id}"
    token_file.write_text(hub.token(f"agent-{worker_id}", "agent", worker_id))
    env = dict(hub.env)
    env.update(JOBCORE_AGENT_MAX_BACKOFF="1s", JOBCORE_AGENT_REQUEST_TIMEOUT="5s")
    with open(hub.tmp / f"agent-{worker_id}.log", "ab") as log:
        return subprocess.Popen(
            [
                *JOBCORE,
                *("agent", "--hub", url, "--token-file", str(token_file)),
                *("--worker-id", worker_id, "--cache-dir", str(hub.tmp / f"cache-{worker_id}")),
                *("--concurrency", "4"),
            ],
            env=env,
            stdout=log,
            stderr=log,
        )


@dataclass
class RssWatch:
    """Samples the hub's VmRSS every 0.25 s (whichever hub process is current)."""

    hub: Hub
    peak_kb: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    timeline: list[tuple[float, int, int]] = field(default_factory=list)  # (s, pid, kB) per 10 s

    def run(self) -> None:
        started = last = time.perf_counter()
        while not self.stop.wait(0.25):
            proc = self.hub.proc
            if proc is not None:
                kb = rss_kb(proc.pid)
                self.peak_kb = max(self.peak_kb, kb)
                if time.perf_counter() - last >= 10:
                    last = time.perf_counter()
                    self.timeline.append((round(last - started), proc.pid, kb))


def enqueue(hub: Hub, ms: list[int]) -> list[str]:
    ids: list[str] = []
    for start in range(0, len(ms), 1000):
        batch = [{"type": "soak", "payload": {"ms": m}} for m in ms[start : start + 1000]]
        answer = hub.http.post("/api/jobs/batch", json={"jobs": batch})
        answer.raise_for_status()
        ids += [job["id"] for job in answer.json()["jobs"]]
    return ids


def read_store(db: str) -> dict[str, tuple[str, int, list[dict[str, Any]]]]:
    """id -> (status, attempts, history) for every job in the store."""
    rows: list[tuple[Any, ...]]
    if db.startswith("postgresql://"):
        import psycopg

        url, _, schema = db.partition("?schema=")
        with psycopg.connect(url) as conn:
            rows = conn.execute(
                f'SELECT id, status, attempts, history FROM "{schema}".jobs'
            ).fetchall()
    else:
        import sqlite3

        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            rows = conn.execute("SELECT id, status, attempts, history FROM jobs").fetchall()
    out = {}
    for job_id, status, attempts, history in rows:
        out[str(job_id)] = (
            str(status),
            int(attempts),
            json.loads(history) if isinstance(history, str) else list(history),
        )
    return out


@dataclass
class Run:
    attempt: int
    lease: str
    worker: str
    start_ms: float
    end_ms: float | None  # None: started, never recorded an end


def read_runs(folder: Path) -> dict[str, list[Run]]:
    runs: dict[str, dict[tuple[str, str, str], Run]] = defaultdict(dict)
    for path in sorted(folder.glob("runs-*.log")):
        for line in path.read_text().splitlines():
            parts = line.split()
            job_id, attempt, lease, worker, start = parts[1:6]
            key = (attempt, lease, start)
            if parts[0] == "S":
                runs[job_id].setdefault(
                    key, Run(int(attempt), lease, worker, int(start) / 1e6, None)
                )
            else:
                runs[job_id][key] = Run(
                    int(attempt), lease, worker, int(start) / 1e6, int(parts[6]) / 1e6
                )
    return {
        job_id: sorted(items.values(), key=lambda r: r.start_ms) for job_id, items in runs.items()
    }


def _ms(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    from jobcore.timeutil import parse_time

    return float(parse_time(value))


def check(
    ids: list[str],
    store: dict[str, tuple[str, int, list[dict[str, Any]]]],
    runs: dict[str, list[Run]],
) -> dict[str, Any]:
    """Every invariant of the soak, with counts and the first examples of each problem."""
    problems: dict[str, list[Any]] = defaultdict(list)
    reruns: Counter[str] = Counter()
    unfinished_runs = 0
    claims_never_run: Counter[str] = Counter()  # a lease the hub recorded, no handler ran under
    attempts_hist: Counter[int] = Counter()
    for job_id in ids:
        if job_id not in store:
            problems["missing from the store"].append(job_id)
            continue
        status, attempts, history = store[job_id]
        attempts_hist[attempts] += 1
        completed = [entry for entry in history if entry.get("outcome") == "completed"]
        if status != "completed":
            problems[f"status {status} at the end"].append(job_id)
        if len(completed) != 1:
            problems["not completed exactly once"].append((job_id, history))
        items = runs.get(job_id, [])
        ended = [run for run in items if run.end_ms is not None]
        unfinished_runs += len(items) - len(ended)
        if not ended:
            problems["handler never ran to its end"].append(job_id)
        by_attempt = {entry.get("attempt"): entry for entry in history}
        ran = {run.attempt for run in items}
        for entry in history:
            if entry.get("attempt") not in ran:
                claims_never_run[f"{entry.get('outcome')}: {entry.get('error')}"] += 1
        seen: Counter[tuple[int, str]] = Counter((run.attempt, run.lease) for run in items)
        for (attempt, lease), count in seen.items():
            if count > 1:
                problems["one lease ran twice"].append((job_id, attempt, lease, count))
        for index, later in enumerate(items[1:], 1):
            earlier = items[index - 1]
            entry = by_attempt.get(earlier.attempt, {})
            reruns[str(entry.get("outcome", "no history entry"))] += 1
            earlier_end = earlier.end_ms if earlier.end_ms is not None else float("inf")
            if later.start_ms < earlier_end:  # overlapping runs: the earlier lease must be over
                lease_end = _ms(entry.get("ended_at"))
                if (
                    entry.get("outcome") != "reclaimed"
                    or lease_end is None
                    or lease_end > later.start_ms + TOLERANCE_MS
                ):
                    problems["overlap under a live lease"].append(
                        (job_id, [vars(run) for run in items], history)
                    )
    return {
        "problems": {name: len(items) for name, items in problems.items()},
        "examples": {name: items[:3] for name, items in problems.items()},
        "reruns_by_earlier_outcome": dict(reruns),
        "jobs_rerun": sum(1 for job_id in ids if len(runs.get(job_id, [])) > 1),
        "runs_started_not_ended": unfinished_runs,
        "claims_never_run": dict(claims_never_run),
        "jobs_by_attempts": dict(sorted(attempts_hist.items())),
    }


def soak(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    db = (
        f"{args.postgres}?schema=soak_{secrets.token_hex(4)}"
        if args.store == "postgres"
        else str(tmp / "hub.db")
    )
    hub = Hub(tmp, db, args.lease)
    watch = RssWatch(hub)
    proxy = FaultProxy(
        hub.url,
        seed=args.seed,
        reset=args.fault_rate,
        bad_gateway=args.fault_rate,
        slow=args.fault_rate * 1.5,
        drop_after=args.fault_rate,
        slow_seconds=(0.05, 0.5),
    )
    agents: list[subprocess.Popen[bytes]] = []
    result: dict[str, Any] = {"store": args.store, "jobs": args.jobs, "agents": args.agents}
    try:
        ms = lengths(args.jobs, args.seed)
        t0 = time.perf_counter()
        ids = enqueue(hub, ms)
        result["enqueue_s"] = round(time.perf_counter() - t0, 1)
        result["hub_rss_before_kb"] = rss_kb(hub.proc.pid)  # type: ignore[union-attr]
        tokens_ready = [(f"soak-{i}") for i in range(args.agents)]
        threading.Thread(target=watch.run, daemon=True).start()
        started = time.perf_counter()
        agents = [start_agent(hub, worker, proxy.url) for worker in tokens_ready]
        restarted = False
        last_done, last_move = -1, time.perf_counter()
        last_print = last_move
        while True:
            time.sleep(0.5)
            try:
                counts = hub.counts()
            except httpx.HTTPError:
                continue
            done = counts.get("completed", 0) + counts.get("failed", 0) + counts.get("cancelled", 0)
            if done != last_done:
                last_done, last_move = done, time.perf_counter()
            if not restarted and done >= args.jobs * args.restart_at:
                result["hub_rss_at_kill_kb"] = rss_kb(hub.proc.pid)  # type: ignore[union-attr]
                result["killed_at_done"] = done
                hub.kill()
                time.sleep(args.down)
                result["hub_restart_s"] = round(hub.start() + args.down, 2)
                result["hub_rss_after_restart_kb"] = rss_kb(hub.proc.pid)  # type: ignore[union-attr]
                restarted = True
            if done >= args.jobs:
                break
            if time.perf_counter() - last_move > args.stall:
                result["stalled"] = counts
                break
            if args.progress and time.perf_counter() - last_print >= 30:
                last_print = time.perf_counter()
                print(f"  {time.perf_counter() - started:.0f}s {counts}", flush=True)
        elapsed = time.perf_counter() - started
        result["elapsed_s"] = round(elapsed, 1)
        result["jobs_per_s"] = round(last_done / elapsed, 1)
        result["hub_rss_after_kb"] = rss_kb(hub.proc.pid)  # type: ignore[union-attr]
        time.sleep(3)  # settled: the agents idle, the hub's keeper has run
        result["hub_rss_after_settle_kb"] = rss_kb(hub.proc.pid)  # type: ignore[union-attr]
        result["hub_rss_peak_kb"] = watch.peak_kb
        result["hub_rss_timeline"] = watch.timeline
        result["counts"] = hub.counts()
        result["requests"] = sum(proxy.requests.values())
        result["faults"] = dict(proxy.faults)
    finally:
        watch.stop.set()
        for agent in agents:
            agent.terminate()
        for agent in agents:
            try:
                agent.wait(40)
            except subprocess.TimeoutExpired:
                agent.kill()
                agent.wait()
        proxy.close()
        hub.close()
    result["agent_exit_codes"] = [agent.returncode for agent in agents]
    result.update(check(ids, read_store(db), read_runs(tmp)))
    result["short_medium_long"] = [
        sum(1 for m in ms if m == 0),
        sum(1 for m in ms if 0 < m < 1000),
        sum(1 for m in ms if m >= 1000),
    ]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--postgres", default=PG_URL, help="--store postgres: the server URL")
    parser.add_argument("--lease", default="5s", help="the hub's lease")
    parser.add_argument("--fault-rate", type=float, default=0.02, help="per fault kind")
    parser.add_argument("--restart-at", type=float, default=0.4, help="fraction done")
    parser.add_argument("--down", type=float, default=2.0, help="seconds the hub stays down")
    parser.add_argument("--stall", type=float, default=120.0, help="give up after no progress")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--progress", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)
    folder = tempfile.mkdtemp(prefix="soak-", dir=Path.home())
    load_before = os.getloadavg()
    result = soak(args, Path(folder))
    result["loadavg_before"] = [round(x, 2) for x in load_before]
    result["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    result["folder"] = folder
    print(json.dumps(result, indent=2, default=str))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str))
    if not args.keep and not result["problems"]:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
    return 1 if result["problems"] or "stalled" in result else 0


if __name__ == "__main__":
    raise SystemExit(main())
