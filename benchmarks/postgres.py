"""`python -m benchmarks.postgres [--quick] [--reps N] [--server URL]`: jobcore on PostgreSQL.

Measured in one run on the same machine, systems interleaved in each
repetition, medians with min-max (the machine is noisy; nothing is asserted):

- drain of pre-enqueued `noop` jobs by 1 and 2 worker processes (10 executor
  threads each): jobcore on PostgreSQL, jobcore on SQLite (FULL), and the raw
  psycopg floor (claim + complete one job per transaction, and 100 per
  transaction, same schema and statements shape);
- enqueue one job per call and 1000 per call: jobcore vs a raw INSERT per
  transaction and one `unnest` INSERT per 1000;
- enqueue -> handler start latency (p50/p99) against an idle worker in another
  process, woken by LISTEN/NOTIFY (PostgreSQL) or `data_version` (SQLite);
  `--only latency` runs these rows alone, with what an idle worker costs;
- the peers, interleaved with those rows (`benchmarks/pg_peers.py`, one module
  each in `benchmarks/peers/`, run as subprocesses): procrastinate, pgqueuer and
  Oban for Python draining the same number of noop jobs (concurrency 10, 1 and 2
  processes), enqueueing one job per call and with their batch APIs, and
  enqueue -> start latency for pgqueuer and a raw LISTEN/NOTIFY floor. A peer
  that is not installed or fails is reported with the reason;
- once, after the repetitions, `benchmarks/pg_scale.py`: claim cost beside 1k,
  100k and 1M finished rows and 100k not-yet-due jobs (PostgreSQL and SQLite),
  and table sizes and claim cost before and after churning 1M jobs, pruned or
  not, and after a manual VACUUM.

The report ends with issue 12's targets, computed from this run's medians.

The server is `--server` (default postgres on 127.0.0.1:5432); each run uses a
database of its own and drops it.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import pg_peers, pg_scale
from benchmarks.cases import _percentiles, _stop
from benchmarks.pg_peers import Peer, PeerError
from jobcore.ids import new_id

ROOT = Path(__file__).resolve().parent.parent
SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"


@dataclass
class Row:
    name: str
    system: str
    unit: str
    values: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # why a repetition has no value

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else float("nan")


class Results:
    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], Row] = {}

    def add(self, name: str, system: str, unit: str, value: float) -> None:
        self.rows.setdefault((name, system), Row(name, system, unit)).values.append(value)
        print(f"  {name:<44} {system:<16} {value:>12,.1f} {unit}", file=sys.stderr, flush=True)

    def note(self, name: str, system: str, unit: str, text: str) -> None:
        """Record why (name, system) has no value in this repetition."""
        self.rows.setdefault((name, system), Row(name, system, unit)).notes.append(text)
        print(f"  {name:<44} {system:<16} {text}", file=sys.stderr, flush=True)

    def median(self, name: str, system: str) -> float:
        row = self.rows.get((name, system))
        return row.median if row else float("nan")


def _queue(db: str, plugins: tuple[tuple[str, Any], ...] = ()) -> Any:
    from jobcore import Config, Queue, make_plugin_manager

    if db.startswith("postgresql://"):
        import jobcore_postgres

        plugins = (*plugins, ("postgres", jobcore_postgres))
    pm = make_plugin_manager(load_entrypoints=False, plugins=plugins)
    return Queue(db, config=Config(env={}), pm=pm)


class Stores:
    """A fresh PostgreSQL schema or SQLite file per measurement."""

    def __init__(self, server: str, tmp: Path) -> None:
        self.server = server
        self.tmp = tmp
        self.database = f"jobcore_bench_{os.getpid()}"
        self.count = 0
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {self.database} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {self.database}")
        self.base = server.rsplit("/", 1)[0] + f"/{self.database}"

    def fresh(self, kind: str) -> str:
        self.count += 1
        if kind == "postgres":
            return f"{self.base}?schema=b{self.count}"
        path = self.tmp / f"b{self.count}.db"
        return str(path)

    def drop(self) -> None:
        pg_peers.Server.when_up(self.server)  # it may be restarting (other sessions' tests)
        with psycopg.connect(self.server, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {self.database} WITH (FORCE)")


def _rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("nan")


@functools.cache
def _unavailable(peer: Peer) -> str | None:
    return peer.missing()


def measure_peer(
    results: Results,
    fresh: Callable[[], str],
    names: tuple[str, ...],
    unit: str,
    peer: Peer,
    fn: Callable[..., float | tuple[float, ...]],
    *args: Any,
) -> None:
    """Add `fn(peer, fresh(), *args)` as the peer's value(s) for `names`, or why there is none."""
    reason = _unavailable(peer)
    if reason is None:
        dsn = fresh().split("?")[0]
        try:
            value = pg_peers.with_restarts(
                dsn, f"{names[0]} {peer.name}", lambda: fn(peer, fresh(), *args)
            )
        except (PeerError, psycopg.Error) as error:
            reason = f"failed: {error}"
        else:
            values = value if isinstance(value, tuple) else (value,)
            for name, each in zip(names, values, strict=True):
                results.add(name, peer.name, unit, each)
            return
    for name in names:
        results.note(name, peer.name, unit, reason)


def _env() -> dict[str, str]:
    path = [str(ROOT), str(ROOT / "plugins"), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}


def drain(db: str, n: int, processes: int, threads: int = 10) -> float:
    queue = _queue(db)
    for start in range(0, n, 5000):
        queue.enqueue_many("noop", [{}] * min(5000, n - start))
    queue.close()
    start_at = str(time.time() + 1.0)
    cmd = [sys.executable, "-m", "benchmarks.postgres", "drain-worker", db, str(threads), start_at]
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=_env())
        for _ in range(processes)
    ]
    reports = []
    for proc in procs:
        out, _ = proc.communicate(timeout=1800)
        if proc.returncode != 0:
            raise RuntimeError(f"drain worker failed on {db}")
        reports.append(json.loads(out.decode().strip().splitlines()[-1]))
    done = sum(r["completed"] for r in reports)
    if done != n:
        raise RuntimeError(f"drain completed {done} of {n}")
    return _rate(n, max(r["end"] for r in reports) - min(r["start"] for r in reports))


def drain_worker(db: str, threads: str, start_at: str) -> None:
    import logging

    from jobcore import Worker

    queue = _queue(db)
    queue.storage.migrate()
    logging.getLogger("jobcore").setLevel(logging.WARNING)
    worker = Worker(queue, concurrency=int(threads), until_empty=True)
    while (delay := float(start_at) - time.time()) > 0:
        time.sleep(min(delay, 0.01))
    start = time.time()
    worker.run()
    stats = {"start": start, "end": time.time(), "completed": worker.stats["completed"]}
    print(json.dumps(stats))
    queue.close()


def idle_worker(db: str) -> None:
    """A worker with default settings and the `stamp` job type, until SIGTERM."""
    import logging

    from benchmarks import plugin
    from jobcore import Worker

    queue = _queue(db, plugins=(("bench", plugin),))
    logging.getLogger("jobcore").setLevel(logging.WARNING)
    Worker(queue, install_signal_handlers=True).run()


_RAW_SCHEMA = """
CREATE TABLE raw_jobs (id text PRIMARY KEY, status text NOT NULL, priority int NOT NULL,
  run_at bigint NOT NULL, attempts int NOT NULL DEFAULT 0, locked_by text, lease_id text,
  result json, updated_at bigint);
CREATE INDEX raw_claim ON raw_jobs (priority DESC, run_at, id) WHERE status = 'pending';
"""
_RAW_CLAIM = (
    "WITH p AS MATERIALIZED (SELECT id FROM raw_jobs WHERE status = 'pending' "
    "ORDER BY priority DESC, run_at, id LIMIT %s FOR UPDATE SKIP LOCKED) "
    "UPDATE raw_jobs j SET status = 'claimed', attempts = attempts + 1, locked_by = 'w', "
    "lease_id = md5(random()::text) FROM p WHERE j.id = p.id RETURNING j.id, j.lease_id"
)
_RAW_COMPLETE = (
    "UPDATE raw_jobs j SET status = 'completed', result = 'null' FROM "
    "unnest(%s::text[], %s::text[]) v(id, lease_id) "
    "WHERE j.id = v.id AND j.lease_id = v.lease_id AND j.status = 'claimed'"
)


def _raw_store(url: str) -> psycopg.Connection[Any]:
    base, schema = url.split("?schema=")
    conn = psycopg.connect(base, autocommit=True)
    conn.execute(f"CREATE SCHEMA {schema}")
    conn.execute(f"SET search_path TO {schema}")
    conn.execute(_RAW_SCHEMA)
    return conn


def raw_drain(url: str, n: int, batch: int) -> float:
    """Claim `batch` jobs in one transaction, complete them in the next."""
    conn = _raw_store(url)
    conn.execute(
        "INSERT INTO raw_jobs (id, status, priority, run_at) "
        "SELECT g::text, 'pending', 0, g FROM generate_series(1, %s) g",
        (n,),
    )
    done = 0
    start = time.perf_counter()
    while done < n:
        with conn.transaction():
            rows = conn.execute(_RAW_CLAIM, (batch,)).fetchall()
        with conn.transaction():
            conn.execute(_RAW_COMPLETE, ([r[0] for r in rows], [r[1] for r in rows]))
        done += len(rows)
    seconds = time.perf_counter() - start
    conn.close()
    return _rate(n, seconds)


def enqueue(db: str, n: int, batch: int) -> float:
    queue = _queue(db)
    queue.storage.migrate()
    start = time.perf_counter()
    if batch == 1:
        for _ in range(n):
            queue.enqueue("noop", {})
    else:
        for _ in range(0, n, batch):
            queue.enqueue_many("noop", [{}] * batch)
    seconds = time.perf_counter() - start
    queue.close()
    return _rate(n, seconds)


def raw_enqueue(url: str, n: int, batch: int) -> float:
    conn = _raw_store(url)
    start = time.perf_counter()
    if batch == 1:
        for _ in range(n):
            conn.execute(
                "INSERT INTO raw_jobs (id, status, priority, run_at) VALUES (%s, 'pending', 0, 0)",
                (new_id(),),
            )
    else:
        for _ in range(0, n, batch):
            conn.execute(
                "INSERT INTO raw_jobs (id, status, priority, run_at) "
                "SELECT id, 'pending', 0, 0 FROM unnest(%s::text[]) id",
                ([new_id() for _ in range(batch)],),
            )
    seconds = time.perf_counter() - start
    conn.close()
    return _rate(n, seconds)


def raw_enqueue_own_schema(db: str, n: int, batch: int) -> float:
    """The raw floor on jobcore's own schema: the same rows, indexes and `job:enqueued` event
    row (one per batch) as jobcore writes, from one plain statement (no validation, no
    Python objects)."""
    from jobcore_postgres.storage import PostgresStorage

    storage = PostgresStorage(db)
    storage.migrate()
    schema = storage.schema
    storage.close()
    sql = (
        f"WITH u AS (INSERT INTO {schema}.jobs (id, type, queue, payload, status, priority, "
        "max_attempts, run_at, created_at, updated_at) "
        f"SELECT id, 'noop', 'default', '{{}}', 'pending', 0, 3, {schema}.now_ms(), "
        f"{schema}.now_ms(), {schema}.now_ms() FROM unnest(%s::text[]) id "
        "RETURNING id, created_at) "
        f"INSERT INTO {schema}.events (at, kind, job_ids) "
        "SELECT min(created_at), 'job:enqueued', array_agg(id) FROM u"
    )
    conn = psycopg.connect(db.split("?")[0], autocommit=True)
    start = time.perf_counter()
    for _ in range(0, n, batch):
        conn.execute(sql, ([new_id() for _ in range(batch)],))
    seconds = time.perf_counter() - start
    conn.close()
    return _rate(n, seconds)


def _until_completed(queue: Any, n: int, timeout: float = 60.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline and queue.storage.count_by_status().get("completed", 0) < n:
        time.sleep(0.05)


def latency(db: str, k: int) -> tuple[float, float]:
    from benchmarks import plugin

    queue = _queue(db, plugins=(("bench", plugin),))
    queue.storage.migrate()
    worker = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.postgres", "idle-worker", db],
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # a first job that the worker runs once it is up (a loaded machine may take seconds
        # to start it); it is not measured
        queue.enqueue("stamp", {"t0": time.time()})
        _until_completed(queue, 1)
        time.sleep(0.5)  # idle again
        ids = []
        for i in range(k):
            time.sleep(0.01 + (i % 7) * 0.003)
            ids.append(queue.enqueue("stamp", {"t0": time.time()}).job.id)
        _until_completed(queue, k + 1)
        values = [queue.get(job_id).result["latency_ms"] for job_id in ids]
    finally:
        _stop(worker)
        queue.close()
    return _percentiles(values)


@dataclass(frozen=True)
class Sizes:
    reps: int
    drain: int
    raw: int
    enqueue: int
    batch: int
    latency: int
    scale: pg_scale.Scale | None  # run once, not per repetition; None: not run


FULL = Sizes(3, 20_000, 5000, 2000, 20_000, 100, pg_scale.FULL)
QUICK = Sizes(1, 3000, 1000, 300, 3000, 20, pg_scale.QUICK)


DRAIN_1 = "drain, 1 process(es) x 10 threads"
RAW_DRAIN_1 = "drain, raw 1 per txn"
ENQUEUE_1 = "enqueue, 1 per call"
ENQUEUE_BATCH = "enqueue, 1000 per call"
# the raw floor on jobcore's own tables (its indexes and event rows), beside the minimal one
RAW_OWN = "raw-postgres, jobcore schema"
LATENCY = ("enqueue -> start p50", "enqueue -> start p99")

# The figures (jobs/s, or ms for latency), measured on a quiet machine, for scale.
REFERENCE: dict[tuple[str, str], float] = {
    (DRAIN_1, "procrastinate"): 500,
    (DRAIN_1, "oban-py"): 2322,
    (DRAIN_1, "pgqueuer"): 6128,
    (RAW_DRAIN_1, "raw-postgres"): 1539,
    ("drain, raw 100 per txn", "raw-postgres"): 16470,
    (ENQUEUE_1, "procrastinate"): 847,
    (ENQUEUE_1, "oban-py"): 1408,
    (ENQUEUE_1, "pgqueuer"): 2203,
    (ENQUEUE_1, "raw-postgres"): 3352,
    (ENQUEUE_BATCH, "pgqueuer"): 47670,
    (ENQUEUE_BATCH, "raw-postgres"): 96574,
    (LATENCY[0], "pgqueuer"): 3.8,
    (LATENCY[1], "pgqueuer"): 6.3,
    (LATENCY[0], "raw-notify"): 2.0,
    (LATENCY[1], "raw-notify"): 2.6,
}


def measure_ours(
    results: Results,
    stores: Stores,
    names: tuple[str, ...],
    system: str,
    unit: str,
    fn: Callable[..., float | tuple[float, ...]],
    kind: str,
    *args: Any,
) -> None:
    """Add `fn(stores.fresh(kind), *args)`, taken again on a new store if PostgreSQL
    restarted under it (other sessions' tests restart the shared server)."""
    value = pg_peers.with_restarts(
        stores.server, f"{names[0]} {system}", lambda: fn(stores.fresh(kind), *args)
    )
    values = value if isinstance(value, tuple) else (value,)
    for name, each in zip(names, values, strict=True):
        results.add(name, system, unit, each)


def run(sizes: Sizes, stores: Stores, results: Results) -> None:
    ours = functools.partial(measure_ours, results, stores)
    peer = functools.partial(measure_peer, results, functools.partial(stores.fresh, "postgres"))
    for rep in range(1, sizes.reps + 1):
        print(f"repetition {rep}/{sizes.reps}", file=sys.stderr)
        for procs in (1, 2):
            name = f"drain, {procs} process(es) x 10 threads"
            ours((name,), "jobcore-postgres", "jobs/s", drain, "postgres", sizes.drain, procs)
            ours((name,), "jobcore-sqlite", "jobs/s", drain, "sqlite", sizes.drain, procs)
            for queue in pg_peers.QUEUES:
                peer((name,), "jobs/s", queue, pg_peers.drain, sizes.drain, procs)
        ours((RAW_DRAIN_1,), "raw-postgres", "jobs/s", raw_drain, "postgres", sizes.raw, 1)
        ours(
            ("drain, raw 100 per txn",),
            "raw-postgres",
            "jobs/s",
            raw_drain,
            "postgres",
            sizes.drain,
            100,
        )
        ours((ENQUEUE_1,), "jobcore-postgres", "jobs/s", enqueue, "postgres", sizes.enqueue, 1)
        ours((ENQUEUE_1,), "raw-postgres", "jobs/s", raw_enqueue, "postgres", sizes.enqueue, 1)
        for queue in pg_peers.QUEUES:
            peer((ENQUEUE_1,), "jobs/s", queue, pg_peers.enqueue, sizes.enqueue, 1)
        batch = (ENQUEUE_BATCH,)
        ours(batch, "jobcore-postgres", "jobs/s", enqueue, "postgres", sizes.batch, 1000)
        ours(batch, "raw-postgres", "jobs/s", raw_enqueue, "postgres", sizes.batch, 1000)
        ours(batch, RAW_OWN, "jobs/s", raw_enqueue_own_schema, "postgres", sizes.batch, 1000)
        for queue in pg_peers.QUEUES:
            peer(batch, "jobs/s", queue, pg_peers.enqueue, sizes.batch, 1000)
        for kind in ("postgres", "sqlite"):
            ours(LATENCY, f"jobcore-{kind}", "ms", latency, kind, sizes.latency)
        for queue in (*pg_peers.QUEUES, pg_peers.RAW_NOTIFY):
            peer(LATENCY, "ms", queue, pg_peers.latency, sizes.latency)
    if sizes.scale is not None:
        pg_scale.run(sizes.scale, stores, results)


def idle_cost(db: str, seconds: float) -> tuple[float, float]:
    """(CPU % of a core, transactions/s in the database) of an idle worker over `seconds`."""
    from benchmarks.cases import _cpu_seconds

    queue = _queue(db)
    queue.storage.migrate()
    queue.close()
    worker = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.postgres", "idle-worker", db],
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = db.split("?")[0]
    xacts = (
        "SELECT xact_commit + xact_rollback FROM pg_stat_database "
        "WHERE datname = current_database()"
    )
    try:
        time.sleep(2.0)  # imported, started, idle
        with psycopg.connect(url, autocommit=True) as conn:
            before_tx, before_cpu = conn.execute(xacts).fetchone(), _cpu_seconds(worker.pid)
            time.sleep(seconds)
            after_tx, after_cpu = conn.execute(xacts).fetchone(), _cpu_seconds(worker.pid)
    finally:
        _stop(worker)
    assert before_tx is not None and after_tx is not None
    # other databases are not counted; this connection's own two reads are
    return (after_cpu - before_cpu) / seconds * 100, (after_tx[0] - before_tx[0] - 2) / seconds


def run_latency(sizes: Sizes, stores: Stores, results: Results) -> None:
    """`--only latency`: the latency rows alone (jobcore on PostgreSQL and SQLite and the
    raw LISTEN/NOTIFY floor, interleaved), and what an idle PostgreSQL worker costs."""
    for rep in range(1, sizes.reps + 1):
        print(f"repetition {rep}/{sizes.reps}", file=sys.stderr)
        for kind in ("postgres", "sqlite"):
            measure_ours(
                results, stores, LATENCY, f"jobcore-{kind}", "ms", latency, kind, sizes.latency
            )
        fresh = functools.partial(stores.fresh, "postgres")
        measure_peer(
            results, fresh, LATENCY, "ms", pg_peers.RAW_NOTIFY, pg_peers.latency, sizes.latency
        )
        cpu, rate = idle_cost(stores.fresh("postgres"), 20.0 if sizes is FULL else 10.0)
        results.add("idle worker CPU", "jobcore-postgres", "% of a core", cpu)
        results.add("idle worker transactions", "jobcore-postgres", "/s", rate)


def _ratio(a: float, b: float) -> str:
    return "" if math.isnan(a) or math.isnan(b) or b == 0 else f"{a / b:.2f}x"


def targets(results: Results) -> list[tuple[str, float, str, bool]]:
    """Issue 12's targets: (what, measured, shown as, met) from this run's medians."""
    pg = functools.partial(results.median, system="jobcore-postgres")
    rows = [
        ("drain by 1 process: jobcore-postgres / pgqueuer >= 1.2", DRAIN_1, "pgqueuer", 1.2),
        (
            "drain by 1 process: jobcore-postgres / raw one-commit floor >= 4",
            RAW_DRAIN_1,
            "raw-postgres",
            4.0,
        ),
        ("enqueue 1 per call: jobcore-postgres / raw >= 0.8", ENQUEUE_1, "raw-postgres", 0.8),
        (
            "batch enqueue (1000 per call): jobcore-postgres / raw unnest >= 0.5",
            ENQUEUE_BATCH,
            "raw-postgres",
            0.5,
        ),
    ]
    rows.append(
        (
            "batch enqueue (1000 per call): jobcore-postgres / raw unnest on jobcore's schema "
            "(not an issue target: what the schema costs vs what the client costs)",
            ENQUEUE_BATCH,
            RAW_OWN,
            0.5,
        )
    )
    out: list[tuple[str, float, str, bool]] = []
    for what, name, system, target in rows:
        ours = pg(DRAIN_1) if name == RAW_DRAIN_1 else pg(name)
        value = ours / results.median(name, system)
        out.append((what, value, f"{value:.2f}x", value >= target))
    for name, limit in ((LATENCY[0], 3.5), (LATENCY[1], 6.0)):
        value = pg(name)
        out.append(
            (f"jobcore-postgres {name} <= {limit} ms", value, f"{value:.2f} ms", value <= limit)
        )
    return out


def report(results: Results, sizes: Sizes, seconds: float) -> str:
    lines = [
        f"{sizes.reps} repetition(s), {seconds:.0f}s. Medians (min-max). "
        '"jobcore-postgres / this": the jobcore-postgres median of the same measurement '
        "over this row's (above 1: jobcore is faster). \"issue's figure\": issue 12's "
        "reference measurement on a quiet machine, for scale only.",
        "",
        "| measurement | system | median | min-max | jobcore-postgres / this | issue's figure |",
        "|---|---|---|---|---|---|",
    ]
    for row in results.rows.values():
        reference = REFERENCE.get((row.name, row.system))
        shown = f"{reference:,g} {row.unit}" if reference else ""
        if not row.values:
            lines.append(
                f"| {row.name} | {row.system} | {'; '.join(dict.fromkeys(row.notes))} | | | {shown} |"
            )
            continue
        versus = ""
        if row.unit == "jobs/s" and row.system != "jobcore-postgres":
            versus = _ratio(results.median(row.name, "jobcore-postgres"), row.median)
        spread = f"{min(row.values):,.1f}-{max(row.values):,.1f}"
        if row.notes:
            spread += f" ({len(row.notes)} failed: {row.notes[-1]})"
        lines.append(
            f"| {row.name} | {row.system} | {row.median:,.1f} {row.unit} | {spread} | {versus} | {shown} |"
        )
    lines += [
        "",
        "Issue 12's targets, from the medians above:",
        "",
        "| target | measured | met |",
        "|---|---|---|",
    ]
    for what, value, shown, met in targets(results):
        verdict = "not measured" if math.isnan(value) else ("met" if met else "missed")
        lines.append(f"| {what} | {'-' if math.isnan(value) else shown} | {verdict} |")
    return "\n".join(lines)


def environment(server: str, command: list[str], load: float) -> str:
    """Where and how the run was made: the server, its commit setting, the load, the peers."""
    try:
        pg_peers.Server.when_up(server)
        with psycopg.connect(server) as conn:
            version, sync = conn.execute(
                "SELECT current_setting('server_version'), current_setting('synchronous_commit')"
            ).fetchone() or ("?", "?")
    except psycopg.OperationalError as error:
        version, sync = f"(not reachable at the end: {error})", "?"
    peers = [
        peer.version() or f"{peer.name} not installed"
        for peer in (*pg_peers.QUEUES, pg_peers.RAW_NOTIFY)
    ]
    return (
        f"`python -m benchmarks.postgres {' '.join(command)}`, finished "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. PostgreSQL {version} "
        f"(synchronous_commit {sync}), {os.cpu_count()} cores, 1-minute load average "
        f"{load:.1f} at the start and {os.getloadavg()[0]:.1f} at the end. "
        f"Peers: {', '.join(peers)}."
    )


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "drain-worker":
        drain_worker(*args[1:])
        return
    if args and args[0] == "idle-worker":
        idle_worker(args[1])
        return
    parser = argparse.ArgumentParser(prog="python -m benchmarks.postgres")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--reps", type=int)
    parser.add_argument("--server", default=SERVER)
    parser.add_argument("--only", choices=["latency"], help="run these rows alone, save nothing")
    parser.add_argument(
        "--no-scale",
        action="store_true",
        help="leave out benchmarks/pg_scale.py (its own results: python -m benchmarks.pg_scale)",
    )
    options = parser.parse_args(args)
    sizes = QUICK if options.quick else FULL
    if options.reps:
        sizes = Sizes(options.reps, *list(sizes.__dict__.values())[1:])
    if options.no_scale:
        sizes = replace(sizes, scale=None)
    results = Results()
    began = time.time()
    load = os.getloadavg()[0]
    failure = ""
    with tempfile.TemporaryDirectory(dir=Path.home()) as tmp:
        stores = Stores(options.server, Path(tmp))
        try:
            try:
                (run_latency if options.only == "latency" else run)(sizes, stores, results)
            except Exception as error:  # the report keeps what was measured before it
                traceback.print_exc()
                failure = f"{type(error).__name__}: {error}".strip()
            if options.only:
                text = report(results, sizes, time.time() - began)
            else:
                parts = [
                    "# jobcore on PostgreSQL: benchmark results",
                    environment(options.server, args, load),
                    report(results, sizes, time.time() - began),
                ]
                if failure:
                    parts.append(
                        f"**The run stopped early**, the rows above are what it had: {failure}"
                    )
                text = "\n\n".join(parts)
                name = "postgres-quick.md" if options.quick else "postgres.md"
                (ROOT / "benchmarks" / "results" / name).write_text(text + "\n")
            print(text)
        finally:
            stores.drop()
    if failure:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
