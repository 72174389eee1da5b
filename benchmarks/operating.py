"""Operating a queue (DESIGN §16): what pauses cost the claim, old code vs new, same run.

`python -m benchmarks.operating [--jobs N] [--reps R] [--old /work/main] [--db sqlite|postgres]
[--claims]`; `--claims` measures one-job claims inside one transaction (CPU per claim)
instead of drains.

Each repetition drains N pre-enqueued `noop` jobs with one worker process (4
executor threads) on a fresh store, alternating the code under `--old` (its
checkout and plugins on PYTHONPATH) with this checkout: nothing paused, and
(new code only) with another queue paused, so every claim carries the skip.
The rate is read from the store (first `claimed_at` to last `completed_at`);
CPU per job is the worker process's user+system time while draining. Medians
are reported with their ratios to the old code's; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_DRAIN_CHILD = r"""
import json, resource, sys
from jobcore.testing import make_queue, drain
db, n, held = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
modules = ["jobcore_postgres"] if "://" in db else []
queue = make_queue(db, modules=modules)
for start in range(0, n, 5000):
    queue.enqueue_many("noop", [{}] * min(5000, n - start))
if held:
    HELD_BACK
before = resource.getrusage(resource.RUSAGE_SELF)
drain(queue, concurrency=4)
after = resource.getrusage(resource.RUSAGE_SELF)
jobs = queue.list_jobs(statuses=["completed"], limit=n + 1)
assert len(jobs) == n, len(jobs)
first = min(j.claimed_at for j in jobs)
last = max(j.completed_at for j in jobs)
cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
import jobcore
rate = n * 1000 / max(1, last - first)
print(json.dumps({"rate": rate, "cpu_us": cpu * 1e6 / n, "code": jobcore.__file__}))
"""


def drain_child(held_back: str) -> str:
    """A child script: enqueue argv[2] noops into store argv[1]; when argv[3] is "1" run the
    statement `held_back` first; drain with 4 threads; print rate and CPU per job as JSON."""
    return _DRAIN_CHILD.replace("HELD_BACK", held_back)


CHILD = drain_child('queue.storage.pause("queue", "elsewhere", reason="bench", by="bench")')


CLAIMS = r"""
import json, sys, time
from jobcore.testing import make_queue
db, n, pause = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
modules = ["jobcore_postgres"] if "://" in db else []
queue = make_queue(db, modules=modules)
for start in range(0, n, 5000):
    queue.enqueue_many("noop", [{}] * min(5000, n - start))
if pause:
    queue.storage.pause("queue", "elsewhere", reason="bench", by="bench")
storage = queue.storage
with storage.transaction():  # no commit per claim: the claim's own cost
    begin = time.process_time()
    got = sum(len(storage.claim(worker="w", limit=1, lease_ms=60_000)) for _ in range(n))
    cpu = time.process_time() - begin
assert got == n, got
import jobcore
print(json.dumps({"rate": n / cpu, "cpu_us": cpu * 1e6 / n, "code": jobcore.__file__}))
"""


def _store(kind: str, tmp: Path) -> str:
    if kind == "sqlite":
        return str(tmp / f"bench-{secrets.token_hex(4)}.db")
    return f"postgresql://postgres@127.0.0.1:5432/test?schema=bench_{secrets.token_hex(4)}"


def _drop(db: str) -> None:
    if "://" not in db:
        for suffix in ("", "-wal", "-shm"):
            Path(db + suffix).unlink(missing_ok=True)
        return
    import psycopg

    schema = db.rsplit("schema=", 1)[1]
    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/test", autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def _drain(code: Path, db: str, n: int, pause: bool, script: str = CHILD) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": f"{code}{os.pathsep}{code / 'plugins'}"}
    env = {k: v for k, v in env.items() if not k.startswith("JOBCORE_")}
    out = subprocess.run(
        [sys.executable, "-c", script, db, str(n), "1" if pause else "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=code,  # `python -c` puts the working directory first on sys.path
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["code"] == str(code / "jobcore" / "__init__.py"), result
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--old", type=Path, default=Path("/work/main"))
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument(
        "--claims", action="store_true", help="one-job claims in one transaction (CPU per claim)"
    )
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"old": [], "new": [], "new, a queue paused": []}
    with tempfile.TemporaryDirectory(dir=os.path.expanduser("~")) as folder:
        for rep in range(args.reps):
            order = [("old", args.old, False), ("new", ROOT, False)]
            order += [("new, a queue paused", ROOT, True)]
            if rep % 2:
                order.reverse()
            for label, code, pause in order:
                db = _store(args.db, Path(folder))
                try:
                    script = CLAIMS if args.claims else CHILD
                    runs[label].append(_drain(code, db, args.jobs, pause, script))
                finally:
                    _drop(db)
    what = "one-job claims, CPU" if args.claims else "noop drain, 1 worker x 4 threads"
    print(f"{what}, {args.db}, {args.jobs} jobs, {args.reps} reps")
    print_runs(runs, "old", width=22)


def print_runs(runs: dict[str, list[dict[str, float]]], base: str, width: int) -> None:
    """One line per label: median rate and CPU per job, each as a ratio to `base`'s."""
    base_rate = statistics.median(r["rate"] for r in runs[base])
    base_cpu = statistics.median(r["cpu_us"] for r in runs[base])
    for label, results in runs.items():
        rate = statistics.median(r["rate"] for r in results)
        cpu = statistics.median(r["cpu_us"] for r in results)
        rates = ", ".join(f"{r['rate']:.0f}" for r in results)
        print(
            f"{label:{width}} {rate:8.0f} jobs/s ({rate / base_rate:.3f}x)  "
            f"{cpu:6.1f} us CPU/job ({cpu / base_cpu:.3f}x)  [{rates}]"
        )


if __name__ == "__main__":
    main()
