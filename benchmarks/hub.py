"""Hub benchmarks: `python -m benchmarks.hub [--quick] [--old /work/main]` (a real
`jobcore serve` on loopback).

Measured in one run, on a database under $HOME, synchronous=FULL:
- enqueue over HTTP (1 keep-alive client; 16 concurrent), one job per request,
  against the library's enqueue (one job per transaction, in-process); and
  `POST /api/jobs/batch` of 1,000 against the library's `enqueue_many` of 1,000;
- the JSON queue's own loop (`GET /api/queue`, then `PUT /api/queue/{id}`, one job
  per request) with 4 clients, against the raw floor below;
- claim -> result round trips through the hub with 4 claiming clients (noop
  jobs) against the raw floor: claim and complete with plain APSW, one job per
  transaction each (what a hub without group commit could at best do);
- long-poll wake-up: a job enqueued by another process -> the waiting claim's
  answer, p50 and p99 (ms);
- 500 idle long-polling clients on one hub: its CPU (% of one core) and RSS;
- what recording events costs a worker's drain, when the store can switch
  events off (reported as n/a otherwise).
With `--old CHECKOUT` the producer and JSON-queue rows run against that checkout's hub
too (`CHECKOUT:CHECKOUT/plugins` on its PYTHONPATH), alternating old and new, and report
both with their ratio. Beside each rate, the hub's CPU per job (steadier than rates on
a shared machine). Clients are plain `http.client` keep-alive connections, one thread
each, so the client's own cost stays small beside the hub's.
Nothing is asserted; figures go to the terminal and benchmarks/results/hub.md.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import apsw
import httpx

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "hub.md"


def _env(code: Path = ROOT, **extra: str) -> dict[str, str]:
    """The environment of a process running the jobcore of checkout `code` (and its plugins)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBCORE_")}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(code), str(code / "plugins"), env.get("PYTHONPATH", "")]
    )
    env.update(extra)
    return env


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class HubProcess:
    def __init__(self, db: str, code: Path = ROOT, **env: str) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jobcore",
                "--db",
                db,
                "serve",
                "--insecure-no-auth",
                "--port",
                str(self.port),
            ],
            env=_env(code, **env),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/api/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.05)
        raise RuntimeError("the hub did not start")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)

    def cpu(self) -> float:
        return _cpu_seconds(self.proc.pid)


class Client:
    """One keep-alive HTTP/1.1 connection (`http.client`: a small cost per request)."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=60)

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        self.conn.request(method, path, body=data, headers=headers)
        answer = self.conn.getresponse()
        raw = answer.read()
        if answer.status >= 400:
            raise RuntimeError(f"{method} {path}: {answer.status} {raw[:200]!r}")
        return answer.status, json.loads(raw) if raw else None

    def close(self) -> None:
        self.conn.close()


Measured = tuple[float, float]  # jobs/s, the hub's CPU µs per job


def _queue(db: str) -> Any:
    from jobcore import Config, Queue

    return Queue(db, config=Config(env={}))


def _fresh(folder: Path, name: str) -> str:
    path = folder / name
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    return str(path)


def _rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


# -- enqueue --------------------------------------------------------------------------


def library_enqueue(folder: Path, n: int) -> float:
    with _queue(_fresh(folder, "lib.db")) as queue:
        queue.storage.migrate()
        start = time.perf_counter()
        for _ in range(n):
            queue.enqueue("noop", {})
        return _rate(n, time.perf_counter() - start)


def library_enqueue_many(folder: Path, n: int, size: int = 1000) -> float:
    with _queue(_fresh(folder, "lib-many.db")) as queue:
        queue.storage.migrate()
        start = time.perf_counter()
        for _ in range(max(1, n // size)):
            queue.enqueue_many("noop", [{} for _ in range(size)])
        return _rate(max(1, n // size) * size, time.perf_counter() - start)


def _parallel(clients: int, work: Callable[[int], int]) -> tuple[int, float]:
    """Run `work(index)` in `clients` threads at once: (its summed count, seconds)."""
    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        total = sum(pool.map(work, range(clients)))
    return total, time.perf_counter() - start


def http_enqueue(folder: Path, n: int, clients: int, code: Path = ROOT) -> Measured:
    hub = HubProcess(_fresh(folder, f"http-enqueue-{clients}.db"), code)
    try:
        per = n // clients

        def one(_: int) -> int:
            client = Client(hub.url)
            try:
                for _ in range(per):
                    client.call("POST", "/api/jobs", {"type": "noop"})
            finally:
                client.close()
            return per

        cpu = hub.cpu()
        total, seconds = _parallel(clients, one)
        return _rate(total, seconds), (hub.cpu() - cpu) / total * 1e6
    finally:
        hub.stop()


def http_batch(folder: Path, n: int, code: Path = ROOT, size: int = 1000) -> Measured:
    """`POST /api/jobs/batch` of `size` jobs, one client, one request after another."""
    hub = HubProcess(_fresh(folder, "http-batch.db"), code)
    try:
        client = Client(hub.url)
        body = {"jobs": [{"type": "noop"} for _ in range(size)]}
        requests = max(1, n // size)
        cpu, start = hub.cpu(), time.perf_counter()
        for _ in range(requests):
            client.call("POST", "/api/jobs/batch", body)
        seconds = time.perf_counter() - start
        client.close()
        return _rate(requests * size, seconds), (hub.cpu() - cpu) / (requests * size) * 1e6
    finally:
        hub.stop()


def json_queue_loop(folder: Path, n: int, clients: int = 4, code: Path = ROOT) -> Measured:
    """The JSON queue's worker loop: `GET /api/queue`, then `PUT /api/queue/{id}`."""
    db = _fresh(folder, "json-loop.db")
    with _queue(db) as queue:
        queue.enqueue_many("noop", [{} for _ in range(n)])
    hub = HubProcess(db, code)
    try:

        def worker(_: int) -> int:
            client = Client(hub.url)
            done = 0
            try:
                while True:
                    status, job = client.call("GET", "/api/queue")
                    if status == 204:
                        return done
                    client.call("PUT", f"/api/queue/{job['id']}", {"status": "completed"})
                    done += 1
            finally:
                client.close()

        cpu = hub.cpu()
        total, seconds = _parallel(clients, worker)
        return _rate(total, seconds), (hub.cpu() - cpu) / max(total, 1) * 1e6
    finally:
        hub.stop()


def alternating(
    reps: int, old: Path | None, measure: Callable[[Path], Measured], baseline: Callable[[], float]
) -> tuple[dict[str, Measured], float, float]:
    """`baseline()`, then `measure(code)` for the new checkout (and `old`), in turn, `reps`
    times: the medians of rate and CPU per job of each hub, the baseline's median rate,
    and the median of the per-round ratios new/baseline (steadier under changing load)."""
    runs: dict[str, list[Measured]] = {"new": []}
    if old is not None:
        runs["old"] = []
    bases: list[float] = []
    for _ in range(reps):
        bases.append(baseline())
        for name in runs:
            runs[name].append(measure(ROOT if name == "new" else old or ROOT))
    ratio = statistics.median(
        rate / base for (rate, _), base in zip(runs["new"], bases, strict=True)
    )
    medians = {
        name: (statistics.median(r for r, _ in got), statistics.median(c for _, c in got))
        for name, got in runs.items()
    }
    return medians, statistics.median(bases), ratio


# -- round trip ------------------------------------------------------------------------


def raw_floor(folder: Path, n: int) -> float:
    """Claim one job per transaction, then complete it in another (plain APSW, FULL)."""
    from jobcore.ids import new_id
    from jobcore.storage.sqlite import SQLiteStorage
    from jobcore.timeutil import now_ms

    path = _fresh(folder, "raw.db")
    storage = SQLiteStorage(path)
    storage.migrate()
    storage.close()
    conn = apsw.Connection(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    now = now_ms()
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(
        "INSERT INTO jobs (id, type, queue, payload, status, priority, attempts, max_attempts,"
        " run_at, created_at, updated_at) VALUES (?, 'noop', 'default', '{}', 'pending', 0, 0, 3,"
        " ?, ?, ?)",
        [(new_id(), now, now, now) for _ in range(n)],
    )
    conn.execute("COMMIT")
    start = time.perf_counter()
    for _ in range(n):
        conn.execute("BEGIN IMMEDIATE")
        rows = conn.execute(
            "UPDATE jobs SET status = 'claimed', attempts = attempts + 1, locked_by = 'raw',"
            " claimed_at = ?1 WHERE id = (SELECT id FROM jobs INDEXED BY jobs_claim"
            " WHERE status = 'pending' ORDER BY priority DESC, run_at, id LIMIT 1) RETURNING id",
            (now_ms(),),
        ).fetchall()
        conn.execute("COMMIT")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "UPDATE jobs SET status = 'completed', completed_at = ? WHERE id = ?",
            (now_ms(), rows[0][0]),
        )
        conn.execute("COMMIT")
    seconds = time.perf_counter() - start
    conn.close()
    return _rate(n, seconds)


def round_trip(folder: Path, n: int, clients: int = 4, batch: int = 1) -> float:
    db = _fresh(folder, f"round-trip-{batch}.db")
    with _queue(db) as queue:
        queue.enqueue_many("noop", [{} for _ in range(n)])
    hub = HubProcess(db)
    try:

        def agent(index: int) -> int:
            done = 0
            worker = f"bench-{index}"
            with httpx.Client(base_url=hub.url, timeout=60) as client:
                while True:
                    answer = client.post(
                        "/api/jobs/claim", json={"worker_id": worker, "max_jobs": batch}
                    )
                    if answer.status_code == 204:
                        return done
                    for job in answer.json():
                        client.post(
                            f"/api/jobs/{job['id']}/result",
                            json={"worker_id": worker, "lease_id": job["lease_id"], "result": None},
                        ).raise_for_status()
                        done += 1

        start = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            total = sum(pool.map(agent, range(clients)))
        return _rate(total, time.perf_counter() - start)
    finally:
        hub.stop()


# -- wake-up latency ------------------------------------------------------------------------

ENQUEUER = """
import sys, time
from jobcore import Config, Queue
queue = Queue(sys.argv[1], config=Config(env={}))
queue.storage.migrate()
print("ready", flush=True)
for line in sys.stdin:
    queue.enqueue("noop", {}, queue="lat")
    print(time.time(), flush=True)
"""


def wakeup_latency(folder: Path, k: int) -> tuple[float, float]:
    db = _fresh(folder, "latency.db")
    hub = HubProcess(db)
    enqueuer = subprocess.Popen(
        [sys.executable, "-c", ENQUEUER, db],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    assert enqueuer.stdout is not None and enqueuer.stdin is not None
    enqueuer.stdout.readline()
    samples = []
    try:
        with httpx.Client(base_url=hub.url, timeout=60) as client:
            for _ in range(k):
                answered: dict[str, float] = {}

                def claim(answered: dict[str, float] = answered) -> None:
                    answer = client.post(
                        "/api/jobs/claim", json={"worker_id": "lat", "queues": ["lat"], "wait": 10}
                    )
                    answered["at"] = time.time()
                    answered["status"] = answer.status_code

                thread = threading.Thread(target=claim)
                thread.start()
                time.sleep(0.05)  # the claim is waiting
                enqueuer.stdin.write("go\n")
                enqueuer.stdin.flush()
                committed = float(enqueuer.stdout.readline())
                thread.join()
                if answered.get("status") == 200:
                    samples.append((answered["at"] - committed) * 1000)
    finally:
        enqueuer.stdin.close()
        enqueuer.wait(30)
        hub.stop()
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[
        min(len(ordered) - 1, round(0.99 * len(ordered)) - 1)
    ]


# -- idle clients ------------------------------------------------------------------------


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def idle_clients(folder: Path, clients: int, seconds: float) -> tuple[float, float]:
    hub = HubProcess(_fresh(folder, "idle.db"))

    async def main() -> tuple[float, float]:
        limits = httpx.Limits(max_connections=clients + 10, max_keepalive_connections=clients + 10)
        async with httpx.AsyncClient(base_url=hub.url, timeout=60, limits=limits) as client:
            stop = asyncio.Event()

            async def poll(index: int) -> None:
                while not stop.is_set():
                    await client.post(
                        "/api/jobs/claim",
                        json={"worker_id": f"idle-{index}", "queues": ["none"], "wait": 25},
                    )

            tasks = [asyncio.create_task(poll(i)) for i in range(clients)]
            await asyncio.sleep(3)  # all connected and waiting
            before = _cpu_seconds(hub.proc.pid)
            await asyncio.sleep(seconds)
            used = _cpu_seconds(hub.proc.pid) - before
            rss = _rss_mb(hub.proc.pid)
            stop.set()
            hub.stop()
            await asyncio.gather(*tasks, return_exceptions=True)
            return used / seconds * 100, rss

    try:
        return asyncio.run(main())
    finally:
        if hub.proc.poll() is None:
            hub.stop()


# -- events cost -----------------------------------------------------------------------------


def events_cost(folder: Path, n: int, reps: int = 3) -> str:
    """A worker's drain with the store's event log and without it (its triggers dropped
    in a benchmark-only copy of the schema): what recording events costs."""
    from jobcore import Config, Queue, Worker, make_plugin_manager

    def drain(events: bool) -> tuple[float, float]:
        db = _fresh(folder, f"events-{events}.db")
        pm = make_plugin_manager(load_entrypoints=False)
        with Queue(db, config=Config(env={}), pm=pm) as queue:
            queue.storage.migrate()
            if not events:
                with queue.storage.transaction() as conn:
                    triggers = [
                        row[0]
                        for row in conn.execute(
                            "SELECT name FROM sqlite_master WHERE type = 'trigger'"
                            " AND sql LIKE '%INSERT INTO events%'"
                        )
                    ]
                    for name in triggers:
                        conn.execute(f"DROP TRIGGER {name}")
            queue.enqueue_many("noop", [{} for _ in range(n)])
            start, cpu = time.perf_counter(), time.process_time()
            Worker(queue, concurrency=4, until_empty=True).run()
            # wall-clock rate, and CPU per job (steadier on a shared machine)
            return _rate(n, time.perf_counter() - start), (time.process_time() - cpu) / n * 1e6

    if "events" not in _queue_schema():
        return "n/a (the store has no event log)"
    on: list[tuple[float, float]] = []
    off: list[tuple[float, float]] = []
    for _ in range(reps):  # interleaved: the machine is noisy
        on.append(drain(True))
        off.append(drain(False))
    rate_on, rate_off = (statistics.median(r for r, _ in runs) for runs in (on, off))
    cpu_on, cpu_off = (statistics.median(c for _, c in runs) for runs in (on, off))
    return (
        f"{rate_on:,.0f} jobs/s with events, {rate_off:,.0f} without "
        f"({100 * (1 - rate_on / rate_off):.1f}% slower); CPU {cpu_on:.0f} vs {cpu_off:.0f} µs/job "
        f"({100 * (cpu_on / cpu_off - 1):.1f}% more)"
    )


def _queue_schema() -> str:
    from jobcore.storage.migrations import MIGRATIONS

    return " ".join(script for _, script in MIGRATIONS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes")
    parser.add_argument(
        "--old",
        type=Path,
        default=None,
        help="a checkout of the previous code (e.g. /work/main): its hub runs too, alternating",
    )
    parser.add_argument("--reps", type=int, default=3, help="alternating runs of each hub row")
    parser.add_argument(
        "--only-producers", action="store_true", help="the producer and JSON-queue rows only"
    )
    args = parser.parse_args()
    n = 600 if args.quick else 3000
    idle = 100 if args.quick else 500
    folder = Path(tempfile.mkdtemp(prefix="jobcore-hub-bench-", dir=Path.home()))
    rows: list[tuple[str, str]] = []

    def row(name: str, measure: Callable[[], Any], fmt: Callable[[Any], str]) -> Any:
        value = measure()
        rows.append((name, fmt(value)))
        print(f"{name}: {rows[-1][1]}", flush=True)
        return value

    per_s = lambda v: f"{v:,.0f} jobs/s"  # noqa: E731

    def hub_row(
        name: str, measure: Callable[[Path], Measured], base_name: str, base: Callable[[], float]
    ) -> float:
        got, base_rate, ratio = alternating(args.reps, args.old, measure, base)
        rows.append((base_name, per_s(base_rate)))
        print(f"{base_name}: {rows[-1][1]}", flush=True)
        rate, cpu = got["new"]
        text = f"{rate:,.0f} jobs/s (**{ratio:.2f}x**), hub CPU {cpu:,.0f} µs/job"
        if "old" in got:
            old_rate, old_cpu = got["old"]
            text += (
                f"; before: {old_rate:,.0f} jobs/s ({old_rate / base_rate:.2f}x), {old_cpu:,.0f}"
                f" µs/job; new/old {rate / old_rate:.2f}x rate, {cpu / old_cpu:.2f}x CPU"
            )
        rows.append((name, text))
        print(f"{name}: {text}", flush=True)
        return base_rate

    lib = lambda: library_enqueue(folder, n)  # noqa: E731
    hub_row(
        "enqueue over HTTP, 1 keep-alive client (x library)",
        lambda code: http_enqueue(folder, n, 1, code),
        "enqueue, library, 1 per transaction (in the 1-client rounds)",
        lib,
    )
    hub_row(
        "enqueue over HTTP, 16 clients (x library) [target >= 0.8x]",
        lambda code: http_enqueue(folder, n, 16, code),
        "enqueue, library, 1 per transaction (in the 16-client rounds)",
        lib,
    )
    hub_row(
        "POST /api/jobs/batch of 1,000, 1 client (x library) [target >= 0.5x]",
        lambda code: http_batch(folder, 10 * n, code),
        "enqueue_many of 1,000, library",
        lambda: library_enqueue_many(folder, 10 * n),
    )
    floor = hub_row(
        "JSON queue GET/PUT loop, 4 clients (x raw floor) [target >= 1x]",
        lambda code: json_queue_loop(folder, n, 4, code),
        "raw claim+complete, 1 job per transaction",
        lambda: raw_floor(folder, n),
    )
    if not args.only_producers:
        trip = row("claim -> result via hub, 4 clients", lambda: round_trip(folder, n), per_s)
        trip10 = row(
            "claim(max_jobs=10) -> results via hub, 4 clients",
            lambda: round_trip(folder, n, batch=10),
            per_s,
        )
        rows.append(
            (
                "  ratios vs raw floor",
                f"{trip / floor:.2f}x, {trip10 / floor:.2f}x (batched claims)",
            )
        )
        row(
            "long-poll wake-up (enqueue in another process -> claim answered)",
            lambda: wakeup_latency(folder, 30 if args.quick else 200),
            lambda v: f"p50 {v[0]:.1f} ms, p99 {v[1]:.1f} ms",
        )
        row(
            f"{idle} idle long-polling clients [target <= 5% of a core]",
            lambda: idle_clients(folder, idle, 5 if args.quick else 15),
            lambda v: f"hub CPU {v[0]:.1f}% of a core, RSS {v[1]:.0f} MB",
        )
        row("events' cost to the worker drain", lambda: events_cost(folder, n), str)
    RESULTS.parent.mkdir(exist_ok=True)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    before = f"; before: {args.old}, alternating, {args.reps} runs each" if args.old else ""
    note = (
        "Each hub row runs its baseline, the new hub and the old one in turn; rates are"
        " medians, the bold ratio the median of each round's new/baseline."
    )
    lines = [
        "# Hub benchmark" + (" (quick)" if args.quick else ""),
        "",
        f"{os.cpu_count()} CPUs; load average at the end {load} (the machine is shared){before}.",
        note,
        "",
        "| measurement | result |",
        "|---|---|",
    ]
    lines += [f"| {name} | {value} |" for name, value in rows]
    RESULTS.write_text("\n".join(lines) + "\n")
    print(json.dumps(dict(rows), indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
