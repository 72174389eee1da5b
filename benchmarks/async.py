"""async def handlers vs sync ones, and AsyncQueue vs Queue: `python -m benchmarks.async`.

In one run, alternating the two sides in every repetition (the machine is noisy):

- **sleep drain**: 10,000 jobs that each sleep 50 ms, drained by one worker process:
  `await asyncio.sleep(0.05)` with `--async-concurrency 500` vs `time.sleep(0.05)` with
  32 executor threads. The ideal for the async side is 10,000 x 0.05 / 500 = 1 s; the
  issue's target is ≤ 2 x that plus the noop drain time of 10,000 jobs.
- **noop drain**: 10,000 jobs doing nothing, async (default concurrency 100) vs sync
  (default 4 threads); target: async ≥ 0.8 x the sync rate.
- **memory per in-flight async job**: RSS of a worker holding 2,000 sleeping async jobs
  minus its RSS before it claimed any, per job; target ≤ 10 KB.
- **procrastinate** (if installed; `tox -e bench-pg` installs it) on PostgreSQL: the same
  10,000 sleeping tasks, `concurrency=500`, its psycopg pool at 40 connections (the
  server allows 100, shared), `run_worker_async(wait=False)`. arq is not installed here.
- **enqueue one per call** on PostgreSQL: `await AsyncQueue.enqueue` vs `Queue.enqueue`,
  2,000 each, one after another; target: async ≥ 0.9 x sync.

Each drain runs in its own process (`child`), timed from just before `Worker.run` to its
end, with the process's CPU time (user + system) over the drain. Asserts nothing.
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
    done = 0

    @app.task(name="sleep")
    async def sleep(seconds: float) -> None:
        nonlocal done
        await asyncio.sleep(seconds)
        done += 1

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
        return {"seconds": seconds, "cpu": cpu, "done": done, "kb_per_job": None}

    logging.basicConfig(level=logging.WARNING)
    print(json.dumps(asyncio.run(run())))


def procrastinate_drain(dsn: str, n: int, concurrency: int) -> dict[str, Any] | None:
    try:
        import procrastinate  # noqa: F401
    except ImportError:
        return None
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.async", "procrastinate", dsn, str(n), str(concurrency)],
        env=_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if out.returncode:
        print(f"procrastinate failed (exit {out.returncode}):\n{out.stderr[-1500:]}")
        return None
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    if result["done"] != n:
        raise RuntimeError(f"procrastinate: {result['done']} of {n}\n{out.stderr[-2000:]}")
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


def enqueue_rates(url: str, n: int) -> tuple[float, float]:
    from jobcore import AsyncQueue

    queue = _queue(url)
    queue.storage.migrate()
    queue.enqueue("bench_sync_sleep", {})  # connections warm
    start = time.perf_counter()
    for _ in range(n):
        queue.enqueue("bench_sync_sleep", {})
    sync_rate = n / (time.perf_counter() - start)

    async def run() -> float:
        async with AsyncQueue(queue=queue) as aq:
            await aq.enqueue("bench_async_sleep", {})
            begin = time.perf_counter()
            for _ in range(n):
                await aq.enqueue("bench_async_sleep", {})
            return n / (time.perf_counter() - begin)

    async_rate = asyncio.run(run())
    queue.close()
    return async_rate, sync_rate


def med(values: list[float]) -> str:
    return f"{statistics.median(values):.3g} ({min(values):.3g}-{max(values):.3g})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--pg", default=PG_DEFAULT)
    parser.add_argument("--sqlite-only", action="store_true")
    parser.add_argument("--pg-only", action="store_true")
    args = parser.parse_args()
    stores = [] if args.pg_only else ["sqlite"]
    if not args.sqlite_only:
        try:
            import psycopg

            with psycopg.connect(args.pg, connect_timeout=3):
                stores.append(args.pg)
        except Exception as exc:
            print(f"PostgreSQL skipped: {exc}")
    n = args.jobs
    with tempfile.TemporaryDirectory(dir=os.environ.get("HOME")) as tmp_dir:
        tmp = Path(tmp_dir)
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
                if store != "sqlite":
                    peer = procrastinate_drain(store, n, 500)
                    if peer is not None:
                        figures.setdefault("procrastinate sleep s", []).append(peer["seconds"])
                        figures.setdefault("procrastinate sleep cpu ms/job", []).append(
                            peer["cpu"] * 1000 / n
                        )
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
            if store != "sqlite":
                rates = [enqueue_rates(fresh_db(store, tmp), 2000) for _ in range(args.reps)]
                a = [r[0] for r in rates]
                s = [r[1] for r in rates]
                print(
                    f"enqueue one per call, jobs/s: async {med(a)}, sync {med(s)}; ratio {statistics.median(a) / statistics.median(s):.2f} (target ≥ 0.9)"
                )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "procrastinate":
        procrastinate_child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif len(sys.argv) > 1 and sys.argv[1] == "child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
    else:
        main()
