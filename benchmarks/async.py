"""async def handlers vs sync ones, AsyncQueue vs Queue, and async peers: `python -m benchmarks.async`.

In one run, alternating the sides in every repetition (the machine is noisy):

- **sleep drain**: 10,000 jobs that each sleep 50 ms, drained by one worker process:
  `await asyncio.sleep(0.05)` with `--async-concurrency 500` vs `time.sleep(0.05)` with
  32 executor threads. The ideal for the async side is 10,000 x 0.05 / 500 = 1 s; the
  issue's target is ≤ 2 x that plus the noop drain time of 10,000 jobs.
- **noop drain**: 10,000 jobs doing nothing, async (default concurrency 100) vs sync
  (default 4 threads); target: async ≥ 0.8 x the sync rate.
- **memory per in-flight async job**: RSS of a worker holding 2,000 sleeping async jobs
  minus its RSS before it claimed any, per job; target ≤ 10 KB.
- **peers** (`--peers` alone): the async sleep drain (concurrency 500) through jobcore on
  PostgreSQL and on SQLite, procrastinate 3.10 (its psycopg pool at 40 connections,
  `run_worker_async(wait=False)`), pgqueuer 1.6 (`max_concurrent_tasks=500`,
  `batch_size=250`, `mode=drain`) and arq 0.28 (Redis, `max_jobs=500`, `burst=True`;
  `--redis URL`, default database 13, FLUSHDB before each run), each in its own process
  on a fresh database, the order rotating every repetition; timed from the worker's
  start to the last handler's return, and to the worker's exit. A peer that is not
  installed (`python -m benchmarks.setup_peers --peers`) is left out; `--without NAME`
  leaves one out on purpose. Target: jobcore on PostgreSQL ≥ 1.5 x the faster of
  procrastinate and arq.
- **enqueue one per call** on PostgreSQL and on SQLite (`--enqueue` alone; `--pg-only`,
  `--sqlite-only`): `await AsyncQueue.enqueue` vs `Queue.enqueue`, `--enqueue-jobs` (500)
  each, on a fresh schema (file) per repetition, `--enqueue-reps` (12) times, the two
  sides interleaved in blocks of `--enqueue-block` (50) calls in one event loop, which
  side opens a block alternating (the server's WAL flushes and the neighbours' bursts
  fall on both sides alike); the ratio of every repetition and CPU per call; target
  (PostgreSQL): async ≥ 0.9 x sync.

Each drain runs in its own process, timed around the worker's run, with the process's
CPU time (user + system; the database server's is not counted) over it. Asserts nothing.
Options: `--reps N` (3), `--jobs N` (10000), `--pg URL` (PostgreSQL server; default
127.0.0.1, skipped if unreachable), `--sqlite-only`, `--pg-only`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import resource
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PG_DEFAULT = "postgresql://postgres@127.0.0.1:5432/postgres"
REDIS_DEFAULT = "redis://127.0.0.1:6379/13"  # a database of its own: emptied before each arq run


def _rss_kb() -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _queue(db: str) -> Any:
    from jobcore import Config, Queue, make_plugin_manager

    pm = make_plugin_manager(
        load_entrypoints=db.startswith("postgresql"),
        only=("postgres",) if db.startswith("postgresql") else (),
        modules=["benchmarks.async_types"],
    )
    return Queue(db, config=Config(env={}, options={}), pm=pm)


def child(db: str, kind: str, concurrency: int, async_concurrency: int, hold: int) -> None:
    """One worker drain in this process; prints JSON (seconds, cpu, rss per held job)."""
    from benchmarks.async_types import LAST_DONE
    from jobcore import Worker

    logging.basicConfig(level=logging.WARNING)
    queue = _queue(db)
    queue.storage.migrate()
    worker = Worker(
        queue,
        concurrency=concurrency,
        async_concurrency=async_concurrency,
        until_empty=True,
        types=(kind,),
    )
    held_kb: list[float] = []
    if hold:
        before = _rss_kb()

        def watch() -> None:
            while len(worker.inflight) < hold and not worker.stopping:
                time.sleep(0.01)
            time.sleep(0.2)  # every handler is awaiting its sleep
            held_kb.append((_rss_kb() - before) / hold)

        threading.Thread(target=watch, daemon=True).start()
    cpu0 = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
    start = time.perf_counter()
    worker.run()
    seconds = time.perf_counter() - start
    cpu = sum(resource.getrusage(resource.RUSAGE_SELF)[:2]) - cpu0
    print(
        json.dumps(
            {
                "seconds": seconds,
                "last": LAST_DONE[0] - start if LAST_DONE[0] else seconds,
                "cpu": cpu,
                "done": worker.stats["completed"],
                "kb_per_job": held_kb[0] if held_kb else None,
            }
        )
    )


def procrastinate_child(dsn: str, n: int, concurrency: int) -> None:
    """procrastinate 3 draining `n` tasks that each `await asyncio.sleep(0.05)`, in this
    process: its schema applied, the tasks deferred in batches, then one worker with
    `concurrency` until caught up (`wait=False`); prints JSON like `child`."""
    from procrastinate import App, PsycopgConnector

    schema = f"p{secrets.token_hex(4)}"
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    connector = PsycopgConnector(
        conninfo=dsn,
        kwargs={"options": f"-c search_path={schema}"},
        min_size=4,
        max_size=40,  # the server allows 100 connections, shared with others; jobs share these
    )
    app = App(connector=connector)
    done, last = 0, 0.0

    @app.task(name="sleep")
    async def sleep(seconds: float) -> None:
        nonlocal done, last
        await asyncio.sleep(seconds)
        done += 1
        last = time.perf_counter()

    async def run() -> dict[str, Any]:
        async with app.open_async():
            await app.schema_manager.apply_schema_async()
            for first in range(0, n, 1000):
                await sleep.batch_defer_async(*[{"seconds": 0.05}] * min(1000, n - first))
            cpu0 = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
            start = time.perf_counter()
            await app.run_worker_async(
                concurrency=concurrency, wait=False, install_signal_handlers=False
            )
            seconds = time.perf_counter() - start
            cpu = sum(resource.getrusage(resource.RUSAGE_SELF)[:2]) - cpu0
        return {"seconds": seconds, "last": last - start, "cpu": cpu, "done": done}

    logging.basicConfig(level=logging.WARNING)
    print(json.dumps(asyncio.run(run())))


def arq_child(redis_url: str, n: int, concurrency: int) -> None:
    """arq 0.28 draining `n` jobs that each `await asyncio.sleep(0.05)`, in this process:
    the Redis database emptied (FLUSHDB), the jobs enqueued by `enqueue_job` (100 at a
    time, concurrently), then one `Worker` with `max_jobs=concurrency`, `burst=True`,
    its other settings default (poll_delay 0.5 s, results kept); prints JSON like `child`."""
    from arq import create_pool
    from arq.connections import RedisSettings
    from arq.worker import Worker, func

    done, last = 0, 0.0

    async def sleep(ctx: dict[str, Any], seconds: float) -> None:
        nonlocal done, last
        await asyncio.sleep(seconds)
        done += 1
        last = time.perf_counter()

    async def run() -> dict[str, Any]:
        pool = await create_pool(RedisSettings.from_dsn(redis_url))
        await pool.flushdb()
        for first in range(0, n, 100):
            await asyncio.gather(
                *(pool.enqueue_job("sleep", 0.05) for _ in range(min(100, n - first)))
            )
        worker = Worker(
            functions=[func(sleep, name="sleep")],
            redis_pool=pool,
            max_jobs=concurrency,
            burst=True,
            handle_signals=False,
        )
        cpu0 = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
        start = time.perf_counter()
        await worker.async_run()
        seconds = time.perf_counter() - start
        cpu = sum(resource.getrusage(resource.RUSAGE_SELF)[:2]) - cpu0
        await worker.close()
        return {"seconds": seconds, "last": last - start, "cpu": cpu, "done": done}

    logging.basicConfig(level=logging.WARNING)
    print(json.dumps(asyncio.run(run())))


def pgqueuer_child(dsn: str, n: int, concurrency: int) -> None:
    """pgqueuer 1.6 draining `n` jobs that each `await asyncio.sleep(0.05)`, in this process
    (uvloop, as its CLI): its tables installed in a new schema, the jobs enqueued 1,000 per
    call, then one `PgQueuer` on one asyncpg connection with `max_concurrent_tasks=concurrency`
    and `batch_size=concurrency // 2` (the largest its API allows under that cap),
    `mode=drain`, `dequeue_timeout` 1 s (its idle wait; the 30 s default only delays the
    exit after the last job); prints JSON like `child`."""
    from datetime import timedelta

    import asyncpg
    import psycopg
    import uvloop
    from pgqueuer import AsyncpgDriver, PgQueuer, Queries
    from pgqueuer.models import Job
    from pgqueuer.types import QueueExecutionMode

    schema = f"q{secrets.token_hex(4)}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    done, last = 0, 0.0

    async def run() -> dict[str, Any]:
        nonlocal done, last
        conn = await asyncpg.connect(dsn, server_settings={"search_path": schema})
        queries = Queries(AsyncpgDriver(conn))
        await queries.install(create_schema=False)
        payload = json.dumps({"seconds": 0.05}).encode()
        for first in range(0, n, 1000):
            part = min(1000, n - first)
            await queries.enqueue(["sleep"] * part, [payload] * part, [0] * part)
        pgq = PgQueuer(AsyncpgDriver(conn))

        @pgq.entrypoint("sleep")
        async def sleep(job: Job) -> None:
            nonlocal done, last
            await asyncio.sleep(json.loads(job.payload or b"{}")["seconds"])
            done += 1
            last = time.perf_counter()

        cpu0 = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
        start = time.perf_counter()
        await pgq.run(
            batch_size=concurrency // 2,
            max_concurrent_tasks=concurrency,
            mode=QueueExecutionMode.drain,
            dequeue_timeout=timedelta(seconds=1),
        )
        seconds = time.perf_counter() - start
        cpu = sum(resource.getrusage(resource.RUSAGE_SELF)[:2]) - cpu0
        await conn.close()
        return {"seconds": seconds, "last": last - start, "cpu": cpu, "done": done}

    logging.basicConfig(level=logging.WARNING)
    print(json.dumps(uvloop.run(run())))


PEERS = {"procrastinate": "procrastinate", "arq": "arq", "pgqueuer": "pgqueuer"}
"""Peer name -> the module whose absence skips it."""


def peer_drain(peer: str, target: str, n: int, concurrency: int) -> dict[str, Any] | None:
    """`peer`'s sleep drain in its own process against `target` (a PostgreSQL URL, or a
    Redis URL for arq); None when the peer is not installed or fails (printed)."""
    try:
        __import__(PEERS[peer])
    except ImportError:
        return None
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.async", peer, target, str(n), str(concurrency)],
        env=_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if out.returncode:
        print(f"{peer} failed (exit {out.returncode}):\n{out.stderr[-1500:]}")
        return None
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    if result["done"] != n:
        raise RuntimeError(f"{peer}: {result['done']} of {n}\n{out.stderr[-2000:]}")
    return result


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBCORE_")}
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT), str(ROOT / "plugins"), env.get("PYTHONPATH")])
    )
    return env


def drain(
    db: str,
    kind: str,
    jobs: int,
    seconds: float,
    *,
    concurrency: int = 4,
    async_concurrency: int = 100,
    hold: int = 0,
) -> dict[str, Any]:
    queue = _queue(db)
    queue.storage.migrate()
    for start in range(0, jobs, 1000):
        queue.enqueue_many(kind, [{"seconds": seconds}] * min(1000, jobs - start))
    queue.close()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.async",
            "child",
            db,
            kind,
            str(concurrency),
            str(async_concurrency),
            str(hold),
        ],
        env=_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    if result["done"] != jobs:
        raise RuntimeError(f"{kind}: {result['done']} of {jobs} completed\n{out.stderr[-2000:]}")
    return result


def fresh_db(base: str, tmp: Path) -> str:
    if base.startswith("postgresql"):
        return f"{base}?schema=b{secrets.token_hex(4)}"
    return str(tmp / f"{secrets.token_hex(4)}.db")


def enqueue_rates(url: str, n: int, block: int, async_first: bool) -> dict[str, float]:
    """`n` x `Queue.enqueue` and `n` x `await AsyncQueue.enqueue` on one fresh queue,
    interleaved in blocks of `block` calls a side (which side opens each block
    alternating, `async_first` for the first), so both see the same moments of the
    machine and the server (a WAL flush, a neighbour's burst): jobs/s (calls over the
    side's own time) and process CPU ms per call of each side. The sync calls run on
    the event loop's thread (nothing else runs meanwhile)."""
    from jobcore import AsyncQueue

    queue = _queue(url)
    queue.storage.migrate()
    spent = {"async": 0.0, "sync": 0.0, "async cpu": 0.0, "sync cpu": 0.0}

    def cpu() -> float:
        return sum(resource.getrusage(resource.RUSAGE_SELF)[:2])

    def sync_block(count: int) -> None:
        cpu0, start = cpu(), time.perf_counter()
        for _ in range(count):
            queue.enqueue("bench_sync_sleep", {})
        spent["sync"] += time.perf_counter() - start
        spent["sync cpu"] += cpu() - cpu0

    async def async_block(aq: AsyncQueue, count: int) -> None:
        cpu0, start = cpu(), time.perf_counter()
        for _ in range(count):
            await aq.enqueue("bench_async_sleep", {})
        spent["async"] += time.perf_counter() - start
        spent["async cpu"] += cpu() - cpu0

    async def both() -> None:
        async with AsyncQueue(queue=queue) as aq:
            queue.enqueue("bench_sync_sleep", {})  # connections warm
            await aq.enqueue("bench_async_sleep", {})
            for first, done in enumerate(range(0, n, block)):
                count = min(block, n - done)
                if (first % 2 == 0) == async_first:
                    await async_block(aq, count)
                    sync_block(count)
                else:
                    sync_block(count)
                    await async_block(aq, count)

    asyncio.run(both())
    queue.close()
    return {
        "async": n / spent["async"],
        "sync": n / spent["sync"],
        "async cpu": spent["async cpu"] * 1000 / n,
        "sync cpu": spent["sync cpu"] * 1000 / n,
    }


def med(values: list[float]) -> str:
    return f"{statistics.median(values):.3g} ({min(values):.3g}-{max(values):.3g})"


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def enqueue_report(store: str, tmp: Path, reps: int, n: int, block: int) -> None:
    """The enqueue comparison, `reps` times on fresh schemas (or SQLite files)."""
    runs = [
        enqueue_rates(fresh_db(store, tmp), n, block, async_first=i % 2 == 0) for i in range(reps)
    ]
    ratios = [r["async"] / r["sync"] for r in runs]
    held = sum(r >= 0.9 for r in ratios)
    name = "SQLite" if store == "sqlite" else "PostgreSQL"
    print(
        f"{name} enqueue one per call ({reps} x {n} each side, in alternating blocks of"
        f" {block}), jobs/s: async"
        f" {med([r['async'] for r in runs])}, sync {med([r['sync'] for r in runs])}"
    )
    print(
        f"  CPU ms/call: async {med([r['async cpu'] for r in runs])},"
        f" sync {med([r['sync cpu'] for r in runs])}"
    )
    print(
        f"  async/sync per rep: {' '.join(f'{r:.2f}' for r in ratios)};"
        f" median {med(ratios)} (target ≥ 0.9; held in {held} of {reps}); load {load()}"
    )


def compare(args: argparse.Namespace, pg: str | None, tmp: Path) -> None:
    """The peer comparison: jobcore (PostgreSQL, SQLite), procrastinate, arq and pgqueuer
    draining the same sleeping jobs, each in its own process on a fresh database, the
    order rotating every repetition."""
    n, c = args.jobs, 500

    def jobcore(store: str) -> dict[str, Any]:
        return drain(fresh_db(store, tmp), "bench_async_sleep", n, 0.05, async_concurrency=c)

    runs: list[tuple[str, Any]] = [("jobcore SQLite", lambda: jobcore("sqlite"))]
    if pg:
        runs.append(("jobcore PostgreSQL", lambda: jobcore(pg)))
        runs.append(("procrastinate", lambda: peer_drain("procrastinate", pg, n, c)))
        runs.append(("pgqueuer", lambda: peer_drain("pgqueuer", pg, n, c)))
    runs.append(("arq", lambda: peer_drain("arq", args.redis, n, c)))
    runs = [(name, run) for name, run in runs if name not in args.without]
    figures: dict[str, dict[str, list[float]]] = {}
    for rep in range(args.reps):
        print(f"rep {rep + 1}: load {load()}", flush=True)
        for name, run in runs[rep % len(runs) :] + runs[: rep % len(runs)]:
            got = run()
            if got is None:
                continue
            per = figures.setdefault(name, {})
            per.setdefault("last", []).append(got["last"])
            per.setdefault("exit", []).append(got["seconds"])
            per.setdefault("cpu", []).append(got["cpu"] * 1000 / n)
            print(
                f"  {name:20} to last completion {got['last']:.3g} s, worker exit"
                f" {got['seconds']:.3g} s, CPU {got['cpu'] * 1000 / n:.3g} ms/job",
                flush=True,
            )
    print(f"\n== {n} jobs x await asyncio.sleep(0.05), concurrency {c}, {args.reps} reps ==")
    print(f"{'(median, min-max)':20}{'s to last completion':24}{'s to worker exit':24}CPU ms/job")
    for name, per in figures.items():
        print(f"{name:20}{med(per['last']):24}{med(per['exit']):24}{med(per['cpu'])}")
    if "jobcore PostgreSQL" in figures:
        ours = statistics.median(figures["jobcore PostgreSQL"]["last"])
        for group in (("procrastinate", "arq"), ("procrastinate", "arq", "pgqueuer")):
            peers = {p: statistics.median(figures[p]["last"]) for p in group if p in figures}
            if peers:
                best = min(peers, key=peers.__getitem__)
                print(
                    f"fastest of {'/'.join(group)}: {best} {peers[best]:.3g} s;"
                    f" jobcore PostgreSQL {ours:.3g} s: {peers[best] / ours:.2f}x (target ≥ 1.5x)"
                )
    print(f"load after: {load()}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--pg", default=PG_DEFAULT)
    parser.add_argument("--redis", default=REDIS_DEFAULT)
    parser.add_argument("--sqlite-only", action="store_true")
    parser.add_argument("--pg-only", action="store_true")
    parser.add_argument("--peers", action="store_true", help="only the peer comparison")
    parser.add_argument("--enqueue", action="store_true", help="only the enqueue comparison")
    parser.add_argument("--without", action="append", default=[], choices=sorted(PEERS))
    parser.add_argument("--enqueue-reps", type=int, default=12)
    parser.add_argument("--enqueue-jobs", type=int, default=500)
    parser.add_argument("--enqueue-block", type=int, default=50)
    args = parser.parse_args()
    stores = [] if args.pg_only else ["sqlite"]
    pg = None
    if not args.sqlite_only:
        try:
            import psycopg

            with psycopg.connect(args.pg, connect_timeout=3):
                pg = args.pg
                stores.append(pg)
        except Exception as exc:
            print(f"PostgreSQL skipped: {exc}")
    n = args.jobs
    with tempfile.TemporaryDirectory(dir=os.environ.get("HOME")) as tmp_dir:
        tmp = Path(tmp_dir)
        if args.peers:
            compare(args, pg, tmp)
            return
        if args.enqueue:
            for store in stores:
                enqueue_report(store, tmp, args.enqueue_reps, args.enqueue_jobs, args.enqueue_block)
            return
        for store in stores:
            name = "SQLite" if store == "sqlite" else "PostgreSQL"
            figures: dict[str, list[float]] = {}
            for _ in range(args.reps):
                for label, kind, options in (
                    ("async sleep", "bench_async_sleep", {"async_concurrency": 500}),
                    ("sync sleep", "bench_sync_sleep", {"concurrency": 32}),
                    ("async noop", "bench_async_sleep", {}),
                    ("sync noop", "bench_sync_sleep", {}),
                ):
                    seconds = 0.05 if "sleep" in label else 0.0
                    got = drain(fresh_db(store, tmp), kind, n, seconds, **options)
                    figures.setdefault(f"{label} s", []).append(got["seconds"])
                    figures.setdefault(f"{label} cpu ms/job", []).append(got["cpu"] * 1000 / n)
                held = drain(
                    fresh_db(store, tmp),
                    "bench_async_sleep",
                    2000,
                    3.0,
                    async_concurrency=2000,
                    hold=2000,
                )
                figures.setdefault("KB per in-flight async job", []).append(held["kb_per_job"])
            print(f"\n== {name}: {n} jobs, {args.reps} reps (median, min-max) ==")
            for key, values in figures.items():
                print(f"{key:32} {med(values)}")
            noop = statistics.median(figures["async noop s"])
            ideal = n * 0.05 / 500
            print(
                f"async sleep target ≤ 2x{ideal:g}s + noop drain {noop:.3g}s = {2 * ideal + noop:.3g}s"
            )
            ratio = statistics.median(figures["sync noop s"]) / noop
            print(f"noop drain rate async/sync: {ratio:.2f} (target ≥ 0.8)")
        print()
        compare(args, pg, tmp)
        for store in stores:
            enqueue_report(store, tmp, args.enqueue_reps, args.enqueue_jobs, args.enqueue_block)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "procrastinate":
        procrastinate_child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif len(sys.argv) > 1 and sys.argv[1] == "arq":
        arq_child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif len(sys.argv) > 1 and sys.argv[1] == "pgqueuer":
        pgqueuer_child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif len(sys.argv) > 1 and sys.argv[1] == "child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
    else:
        main()
