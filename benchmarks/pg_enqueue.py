"""`python -m benchmarks.pg_enqueue [--against PATH] [--reps N]`: PostgreSQL enqueue, compared.

One run, systems alternating in each repetition, medians (min-max): jobcore from
this checkout, jobcore from another checkout (`--against PATH`, e.g. /work/main:
the code before a change), pgqueuer 1.6 and the raw floors, enqueueing noop jobs
one per call and 1000 per call (`enqueue_many`), each system in its own process
on a fresh schema. Besides jobs/s, jobcore's rows give the client's CPU per job
(the enqueueing process's user+system time over the jobs), which the machine's
noise moves less than the rate.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks import pg_peers
from benchmarks.postgres import SERVER, Stores, raw_enqueue

ROOT = Path(__file__).resolve().parent.parent

SIZES = {1: 2000, 1000: 20_000}  # jobs per measurement, by jobs per call


CHILD = """
import json, sys, time
import jobcore_postgres
from jobcore import Config, Queue, make_plugin_manager

db, n, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
pm = make_plugin_manager(load_entrypoints=False, plugins=(("postgres", jobcore_postgres),))
queue = Queue(db, config=Config(env={}), pm=pm)
queue.storage.migrate()
queue.enqueue("noop", {})  # the pool's first connection
cpu, start = time.process_time(), time.perf_counter()
if batch == 1:
    for _ in range(n):
        queue.enqueue("noop", {})
else:
    for _ in range(0, n, batch):
        queue.enqueue_many("noop", [{}] * batch)
seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
queue.close()
print(json.dumps({"rate": n / seconds, "cpu_us": cpu / n * 1e6}))
"""
"""Enqueue n noop jobs into db; prints {"rate", "cpu_us"} (the client's CPU per job).
Self-contained: it imports only the checkout's own jobcore."""


def jobcore(checkout: Path, db: str, n: int, batch: int) -> dict[str, float]:
    """One measurement of jobcore from `checkout` (its own modules first on the path)."""
    path = os.pathsep.join([str(checkout), str(checkout / "plugins")])
    out = subprocess.run(
        [sys.executable, "-c", CHILD, db, str(n), str(batch)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": path},
        cwd="/",
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"jobcore at {checkout} failed: {out.stderr.strip()[-500:]}")
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--against", type=Path, help="another checkout to compare with")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--server", default=SERVER)
    parser.add_argument("--batch", type=int, nargs="*", default=[1, 1000])
    parser.add_argument("--no-pgqueuer", action="store_true")
    args = parser.parse_args(argv)
    stores = Stores(args.server, Path("/tmp"))
    systems: list[tuple[str, object]] = [("jobcore (this)", ROOT)]
    if args.against:
        systems.append((f"jobcore ({args.against})", args.against))
    if not args.no_pgqueuer and pg_peers.PGQUEUER.missing() is None:
        systems.append(("pgqueuer", pg_peers.PGQUEUER))
    systems.append(("raw-postgres", None))
    rates: dict[tuple[int, str], list[float]] = {}
    cpus: dict[tuple[int, str], list[float]] = {}
    try:
        for rep in range(args.reps):
            for batch in args.batch:
                n = SIZES.get(batch, 20 * batch)
                order = systems if rep % 2 == 0 else systems[::-1]
                for name, what in order:
                    db = stores.fresh("postgres")
                    if isinstance(what, Path):
                        got = jobcore(what, db, n, batch)
                        cpus.setdefault((batch, name), []).append(got["cpu_us"])
                        rate = got["rate"]
                    elif what is None:
                        rate = raw_enqueue(db, n, batch)
                    else:
                        rate = pg_peers.enqueue(what, db, n, batch)  # type: ignore[arg-type]
                    rates.setdefault((batch, name), []).append(rate)
                    print(f"rep {rep + 1} batch {batch} {name}: {rate:,.0f}/s", file=sys.stderr)
    finally:
        stores.drop()
    print("| jobs per call | system | jobs/s median (min-max) | this / it | client CPU µs/job |")
    print("|---|---|---|---|---|")
    for batch in args.batch:
        ours = statistics.median(rates[(batch, systems[0][0])])
        for name, _ in systems:
            values = rates[(batch, name)]
            med = statistics.median(values)
            cpu = cpus.get((batch, name))
            cpu_text = f"{statistics.median(cpu):.0f}" if cpu else ""
            print(
                f"| {batch} | {name} | {med:,.0f} ({min(values):,.0f}-{max(values):,.0f}) "
                f"| {ours / med:.2f}x | {cpu_text} |"
            )


if __name__ == "__main__":
    main()
