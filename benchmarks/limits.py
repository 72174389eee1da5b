"""Concurrency limits (DESIGN §16): what they cost the claim, old code vs new, same run.

`python -m benchmarks.limits [--jobs N] [--reps R] [--old /work/main] [--db sqlite|postgres]
[--claims] [--rates [--rate 1000000/1s]] [--old-limited]`.

Drains (default): each repetition drains N pre-enqueued `noop` jobs with one
worker process (4 executor threads) on a fresh store, alternating the code
under `--old` with this checkout: no limit, and (new code only) a type limit of
50 on `noop` (more than the worker runs at once, so every claim is a limited
claim that never waits). The rate is read from the store (first `claimed_at`
to last `completed_at`); CPU per job is the worker process's user+system time.

`--rates`: the drains with no limit (old code and new) and, new code only, a
generous rate limit on `noop` (`--rate`, default 1,000,000 per 1 s: more than the
worker starts, so every claim counts and writes starts but never waits).

`--claims`: CPU per one-job claim inside one transaction (new code only), with
a key limit of 1 on `noop`: N claimable jobs of N keys (each completed after
its claim, as a worker would, outside the measure), and the same with 100,000
higher-priority pending jobs of one key that is at its limit (held back).
Flat means the two cost the same. Medians; nothing is asserted.

`--old-limited`: the drains also run the code under `--old` with the type limit,
so that a change to the limited claim is measured against the code before it in
the same run.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from benchmarks.operating import ROOT, _drain, _drop, _store, drain_child, print_runs
from jobcore.rates import parse_rate

CHILD = drain_child('queue.storage.set_limit("type", "noop", 50)')


def rate_child(rate: str) -> str:
    """The drain child with a rate limit `rate` (N/PERIOD) on `noop` when flagged."""
    count, period_ms = parse_rate(rate)
    return drain_child(f'queue.storage.set_rate("type", "noop", {count}, {period_ms})')


CLAIMS = r"""
import json, sys, time
from jobcore.testing import make_queue
db, n, held = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
modules = ["jobcore_postgres"] if "://" in db else []
queue = make_queue(db, modules=modules)
storage = queue.storage
storage.migrate()
def keyed(sql_sqlite, sql_pg):
    if "://" in db:
        with storage._write() as conn:
            conn.execute(sql_pg.replace("jobs", storage._d.table("jobs")))
    else:
        with storage.transaction() as conn:
            conn.execute(sql_sqlite)
if held:
    for start in range(0, 100_000, 5000):
        queue.enqueue_many("noop", [{}] * 5000, priority=5)
    keyed("UPDATE jobs SET limit_key = 'hot'", "UPDATE jobs SET limit_key = 'hot'")
    got = storage.claim(worker="w", limit=1, lease_ms=600_000)  # 'hot' now at its limit
    assert len(got) == 1
made = [i.job.id for start in range(0, n, 5000)
        for i in queue.enqueue_many("noop", [{}] * min(5000, n - start))]
keyed("UPDATE jobs SET limit_key = id WHERE limit_key IS NULL",
      "UPDATE jobs SET limit_key = id WHERE limit_key IS NULL")
storage.set_limit("key", "noop", 1)
def finish(job_id):  # as a worker would: claimed jobs stay few
    if "://" in db:
        with storage._write() as conn:
            conn.execute(f"UPDATE {storage._d.table('jobs')} SET status = 'completed' "
                         "WHERE id = %s", (job_id,))
    else:
        with storage.transaction() as conn:
            conn.execute("UPDATE jobs SET status = 'completed' WHERE id = ?", (job_id,))
cpu = got = 0
with storage.transaction():  # no commit per claim: the claim's own cost
    for _ in range(n):
        begin = time.process_time()
        jobs = storage.claim(worker="w", limit=1, lease_ms=60_000)
        cpu += time.process_time() - begin
        got += len(jobs)
        finish(jobs[0].id)
assert got == n, got
import jobcore
print(json.dumps({"rate": n / cpu, "cpu_us": cpu * 1e6 / n, "code": jobcore.__file__}))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--old", type=Path, default=Path("/work/main"))
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--claims", action="store_true", help="claim cost with keys held back")
    parser.add_argument("--rates", action="store_true", help="drains with a generous rate limit")
    parser.add_argument("--rate", default="1000000/1s", help="the rate limit of --rates")
    parser.add_argument(
        "--old-limited", action="store_true", help="the drains: the old code with the limit too"
    )
    args = parser.parse_args()
    if args.rates:
        order = [("old", args.old, False), ("new", ROOT, False)]
        order += [(f"new, rate {args.rate}", ROOT, True)]
        script = rate_child(args.rate)
    elif args.claims:
        order = [("no backlog", ROOT, False), ("100k held back by a key", ROOT, True)]
        script = CLAIMS
    else:
        order = [("old", args.old, False), ("new", ROOT, False)]
        if args.old_limited:
            order += [("old, type limit 50", args.old, True)]
        order += [("new, type limit 50", ROOT, True)]
        script = CHILD
    runs: dict[str, list[dict[str, float]]] = {label: [] for label, _, _ in order}
    with tempfile.TemporaryDirectory(dir=os.path.expanduser("~")) as folder:
        for rep in range(args.reps):
            for label, code, flag in reversed(order) if rep % 2 else order:
                db = _store(args.db, Path(folder))
                try:
                    runs[label].append(_drain(code, db, args.jobs, flag, script))
                finally:
                    _drop(db)
    first = order[0][0]
    what = "one-job claims, key limit 1, CPU" if args.claims else "noop drain, 1 worker x 4"
    print(f"{what}, {args.db}, {args.jobs} jobs, {args.reps} reps")
    print_runs(runs, first, width=26)


if __name__ == "__main__":
    main()
