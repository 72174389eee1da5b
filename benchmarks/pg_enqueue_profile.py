"""`python -m benchmarks.pg_enqueue_profile [--batch N] [--n N] [--variant NAME ...]`: where one
PostgreSQL enqueue's time goes, as CPU, which a loaded machine moves far less than rates.

For each system it enqueues `n` noop jobs (`batch` per call) on a fresh schema and
reports per job: the client's CPU (this process's user+system time), the server's
CPU (the serving backend's utime+stime from /proc, so the server must run on this
machine), the wall time and the WAL written (the whole server's: other sessions' writes
count too, so compare on a quiet server or take medians). Systems: jobcore from this checkout (`jobcore`), the
same with its schema changed (`jobcore-<change>`; `no-<part>`: what that part
costs the server), pgqueuer 1.6 through its `Queries.enqueue` on asyncpg, and a
raw psycopg INSERT (one column's worth of indexes, no events, no trigger).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.postgres import SERVER, Stores
from jobcore.ids import new_id, new_ids

TICK = os.sysconf("SC_CLK_TCK")

# what a `jobcore-<change>` variant changes in jobcore's schema (`no-<part>`: what that part
# costs the server)
CHANGES = {
    "no-trigger": "DROP TRIGGER events_notify ON {s}.events",
    "no-status-index": "DROP INDEX {s}.jobs_status",
    "no-claim-indexes": "DROP INDEX {s}.jobs_claim_queue; DROP INDEX {s}.jobs_claim_type",
    "no-event-index": "DROP INDEX {s}.events_delivery",
    "c-collation": 'ALTER TABLE {s}.jobs ALTER COLUMN id TYPE text COLLATE "C", '
    'ALTER COLUMN type TYPE text COLLATE "C", ALTER COLUMN queue TYPE text COLLATE "C"',
}


def backend_cpu(pid: int) -> float:
    """Seconds of CPU the server process `pid` has used (utime + stime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def wal_bytes() -> int:
    """The server's WAL position, in bytes (all sessions': run on a quiet server)."""
    with psycopg.connect(SERVER, autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
    return int(row[0]) if row else 0


def measure(pid: int, n: int, batch: int, call: Callable[[], Any]) -> dict[str, float]:
    calls = max(1, n // batch)
    wal = wal_bytes()
    server, client, wall = backend_cpu(pid), time.process_time(), time.perf_counter()
    for _ in range(calls):
        call()
    wall, client = time.perf_counter() - wall, time.process_time() - client
    server = backend_cpu(pid) - server
    jobs = calls * batch
    return {
        "client": client / jobs * 1e6,
        "server": server / jobs * 1e6,
        "wall": wall / jobs * 1e6,
        "wal": (wal_bytes() - wal) / jobs,
    }


def jobcore(url: str, n: int, batch: int, drop: str | None = None) -> dict[str, float]:
    import jobcore_postgres
    from jobcore_postgres.storage import PostgresStorage

    from jobcore import Config, Queue, make_plugin_manager

    storage = PostgresStorage(url, pool_max=1)
    storage.migrate()
    if drop:
        with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
            conn.execute(CHANGES[drop].format(s=storage.schema))
    pm = make_plugin_manager(load_entrypoints=False, plugins=(("postgres", jobcore_postgres),))
    queue = Queue(url, config=Config(env={}), pm=pm, storage=storage)
    for _ in range(10):  # the pool's connection and the prepared statements
        queue.enqueue("noop", {}) if batch == 1 else queue.enqueue_many("noop", [{}] * batch)
    with storage._pool.connection() as conn:
        pid = conn.info.backend_pid
    if batch == 1:
        result = measure(pid, n, batch, lambda: queue.enqueue("noop", {}))
    else:
        result = measure(pid, n, batch, lambda: queue.enqueue_many("noop", [{}] * batch))
    queue.close()
    return result


def raw(url: str, n: int, batch: int) -> dict[str, float]:
    base, schema = url.split("?schema=")
    conn = psycopg.connect(base, autocommit=True)
    conn.execute(f"CREATE SCHEMA {schema}")
    conn.execute(
        f"CREATE TABLE {schema}.raw_jobs (id text PRIMARY KEY, status text NOT NULL, "
        "priority int NOT NULL, run_at bigint NOT NULL)"
    )
    one = f"INSERT INTO {schema}.raw_jobs VALUES (%s, 'pending', 0, 0)"
    many = f"INSERT INTO {schema}.raw_jobs SELECT id, 'pending', 0, 0 FROM unnest(%s::text[]) id"
    for _ in range(10):
        conn.execute(one, (new_id(),), prepare=True)
    pid = conn.info.backend_pid
    if batch == 1:
        result = measure(pid, n, 1, lambda: conn.execute(one, (new_id(),), prepare=True))
    else:
        result = measure(pid, n, batch, lambda: conn.execute(many, (new_ids(batch),)))
    conn.close()
    return result


def pgqueuer(url: str, n: int, batch: int) -> dict[str, float]:
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries

    base, schema = url.split("?schema=")
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")

    async def run() -> dict[str, float]:
        conn = await asyncpg.connect(base, server_settings={"search_path": schema})
        queries = Queries(AsyncpgDriver(conn))
        await queries.install(create_schema=False)
        pid = conn.get_server_pid()
        for _ in range(10):
            await queries.enqueue("noop", None)
        calls = max(1, n // batch)
        wal = wal_bytes()
        server, client, wall = backend_cpu(pid), time.process_time(), time.perf_counter()
        for _ in range(calls):
            if batch == 1:
                await queries.enqueue("noop", None)
            else:
                await queries.enqueue(["noop"] * batch, [None] * batch, [0] * batch)
        wall, client = time.perf_counter() - wall, time.process_time() - client
        server = backend_cpu(pid) - server
        await conn.close()
        jobs = calls * batch
        return {
            "client": client / jobs * 1e6,
            "server": server / jobs * 1e6,
            "wall": wall / jobs * 1e6,
            "wal": (wal_bytes() - wal) / jobs,
        }

    return asyncio.run(run())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--n", type=int, default=0, help="jobs per measurement")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--server", default=SERVER)
    parser.add_argument(
        "--variant",
        nargs="*",
        default=["jobcore", "pgqueuer", "raw"],
        help="jobcore, jobcore-<change> (" + ", ".join(CHANGES) + "), pgqueuer, raw",
    )
    args = parser.parse_args(argv)
    n = args.n or (3000 if args.batch == 1 else 50 * args.batch)
    stores = Stores(args.server, Path("/tmp"))
    got: dict[str, list[dict[str, float]]] = {}
    try:
        for rep in range(args.reps):
            order = args.variant if rep % 2 == 0 else args.variant[::-1]
            for name in order:
                url = stores.fresh("postgres")
                if name == "raw":
                    result = raw(url, n, args.batch)
                elif name == "pgqueuer":
                    result = pgqueuer(url, n, args.batch)
                else:
                    drop = name.removeprefix("jobcore-") if name != "jobcore" else None
                    result = jobcore(url, n, args.batch, drop)
                got.setdefault(name, []).append(result)
                print(f"rep {rep + 1} {name}: {result}", file=sys.stderr, flush=True)
    finally:
        stores.drop()
    print(f"batch {args.batch}, {n} jobs per measurement, {args.reps} reps; medians per job")
    print("| system | client CPU µs | server CPU µs | wall µs | WAL bytes |")
    print("|---|---|---|---|---|")
    for name in args.variant:
        rows = got[name]
        keys = ("client", "server", "wall", "wal")
        med = {k: statistics.median(r[k] for r in rows) for k in keys}
        print(
            f"| {name} | {med['client']:.1f} | {med['server']:.1f} | {med['wall']:.1f} "
            f"| {med['wal']:.0f} |"
        )


if __name__ == "__main__":
    main()
