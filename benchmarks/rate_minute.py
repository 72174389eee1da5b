"""A type rate limit over a minute of work: `python -m benchmarks.rate_minute [--postgres URL]`.

Two worker processes (`jobcore run --concurrency 4`) on the store and one agent
(`jobcore agent --concurrency 4`) through a hub share a rate limit set at run time on the
`noop` type (default 20 per 5 s), with a backlog larger than `--seconds` (default 60) of
it. After `--seconds` everything stops and the jobs' `claimed_at` (the store's clock, ms)
are read:
- starts per window: the most starts in any sliding window of the period (every window
  that opens at a start); must be <= the rate;
- throughput: starts in the first `--seconds` from the first start, per second, against
  rate / period (1.0x: every window filled);
- lag: for each start past the first `rate`, how long after the window let it in (the
  start `rate` before it leaving the window) it came; median and p95 (negative: over the
  limit, never expected).
Nothing is asserted; the results are printed (`--json`) and written with `--out`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.agent import JOBCORE, Hub, _env, _pg_db, _stop


def _worker(hub: Hub, n: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*JOBCORE, "--db", hub.db, "run", "--concurrency", "4", "--worker-id", f"w{n}"],
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=open(hub.tmp / f"worker-{n}.log", "wb"),
    )


def measure(tmp: Path, db: str | None, rate: int, period: float, seconds: float) -> dict[str, Any]:
    from jobcore import Queue

    hub = Hub(tmp, db=db)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        put = hub.http.put("/api/types/noop/limit", json={"rate": rate, "period": period})
        put.raise_for_status()
        backlog = int(seconds / period * rate * 1.5) + rate
        with Queue(hub.db) as queue:
            queue.enqueue_many("noop", [{} for _ in range(backlog)])
        procs = [_worker(hub, 0), _worker(hub, 1), hub.agent("bench-rate")]
        time.sleep(seconds + period)  # the first start comes after the processes start
    finally:
        for proc in procs:
            _stop(proc)
        hub.close()
    with Queue(hub.db) as queue:
        jobs = queue.list_jobs(types=["noop"], limit=backlog + 10)
    claims = sorted(
        (job.claimed_at, (job.history[-1] if job.history else {}).get("worker", "?"))
        for job in jobs
        if job.claimed_at is not None
    )
    starts = [at for at, _ in claims]
    first = starts[0]
    counted = [at for at in starts if at < first + seconds * 1000]
    period_ms = period * 1000
    most = max(
        sum(1 for other in starts[i:] if other < at + period_ms) for i, at in enumerate(starts)
    )
    lags = [(starts[j] - (starts[j - rate] + period_ms)) / 1000 for j in range(rate, len(counted))]
    lags.sort()
    by: dict[str, int] = {}
    for at, worker in claims:
        if at < first + seconds * 1000:
            by[worker] = by.get(worker, 0) + 1
    limit_per_s = rate / period
    achieved = len(counted) / seconds
    return {
        "rate": f"{rate}/{period:g}s",
        "seconds": seconds,
        "starts": len(counted),
        "max_per_window": most,
        "jobs_per_s": round(achieved, 3),
        "vs_limit": round(achieved / limit_per_s, 3),
        "lag_median_ms": round(statistics.median(lags) * 1000, 1) if lags else None,
        "lag_p95_ms": round(lags[min(len(lags) - 1, round(0.95 * len(lags)) - 1)] * 1000, 1)
        if lags
        else None,
        "lag_min_ms": round(lags[0] * 1000, 1) if lags else None,
        "by_claimer": by,
    }


def _drop_schema(url: str) -> None:
    """Remove the fresh schema `_pg_db` made (its name is in the URL)."""
    import psycopg

    server, schema = url.rsplit("schema=", 1)
    with psycopg.connect(server.rstrip("?&"), autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=20)
    parser.add_argument("--period", type=float, default=5.0, help="seconds")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--postgres", help="also on this PostgreSQL server (a fresh schema)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    stores: list[tuple[str, str | None]] = [("sqlite", None)]
    if args.postgres:
        stores.append(("postgres", _pg_db(args.postgres)))
    for store, db in stores:
        with tempfile.TemporaryDirectory() as tmp:
            row = {"store": store, **measure(Path(tmp), db, args.rate, args.period, args.seconds)}
        if db is not None:
            _drop_schema(db)
        rows.append(row)
        print(json.dumps(row) if args.json else row, flush=True)
    return rows


if __name__ == "__main__":
    main()
