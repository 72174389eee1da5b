"""`python -m benchmarks.pg_scale [--quick] [--server URL]`: claim cost and table size at scale.

Part of `python -m benchmarks.postgres` (run once, after its repetitions), or on
its own. Nothing is asserted; each figure is the median of many claims.

- **flat claim**: ms per claim of one job (`commit_batch` with no outcomes: the
  promotion of due jobs plus the claim, one transaction, commits not waiting
  for the disk) beside 1k, 100k and 1M finished rows and 100k not-yet-due
  higher-priority jobs, PostgreSQL and SQLite side by side. The old rows are
  written by one `INSERT … SELECT` (`generate_series` / a recursive CTE), not
  through enqueue; no ANALYZE, as on a server whose autovacuum has not run.
- **churn** (PostgreSQL): 1M jobs through the real storage API (enqueue 10k per
  call, claim + complete 1,000 per `commit_batch`, synchronous_commit off), once
  with pruning as a long-running deployment would (`prune` of every finished
  job each 5% of the run, events older than 0 ms dropped by `sweep` after each
  batch) and once without. Both churns run at once, one process each; then, one
  store at a time: the size of the jobs table (heap + indexes), of its claim
  index and of the events table, and the claim cost, at the start, after the
  churn, and after a manual `VACUUM` (this server runs without autovacuum).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from jobcore_postgres.admin import EVENT_PRUNE_BATCH

from jobcore.errors import TransientStorageError
from jobcore.ids import new_id
from jobcore.models import Completed, Lease, NewJob

SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"
_T = TypeVar("_T")


@dataclass(frozen=True)
class Scale:
    finished: tuple[int, ...]
    not_due: int
    churn: int
    claims: int  # claims timed per measurement


FULL = Scale((1000, 100_000, 1_000_000), 100_000, 1_000_000, 300)
QUICK = Scale((1000, 10_000), 10_000, 20_000, 100)

ENQUEUE_BATCH = 10_000
CLAIM_BATCH = 1000
PRUNE_EVERY = 20  # prunes (each followed by a VACUUM) per pruned churn
PRUNED = "pruned+vacuumed"
KEPT = "unpruned"


def _storage(db: str, **options: Any) -> Any:
    if db.startswith("postgresql://"):
        from jobcore_postgres.storage import PostgresStorage

        storage: Any = PostgresStorage(db, synchronous_commit="off", **options)
    else:
        from jobcore.storage.sqlite import SQLiteStorage

        storage = SQLiteStorage(db, synchronous="OFF")
    storage.migrate()
    return storage


def _new_jobs(n: int) -> list[NewJob]:
    return [
        NewJob(
            id=new_id(),
            type="noop",
            queue="default",
            payload={},
            priority=0,
            max_attempts=3,
            run_at=None,
            timeout_ms=None,
            idempotency_key=None,
        )
        for _ in range(n)
    ]


_PG_ROWS = """
INSERT INTO {s}.jobs (id, type, queue, payload, status, priority, attempts, max_attempts,
  run_at, created_at, updated_at, claimed_at, completed_at, locked_by)
SELECT %(prefix)s || lpad(g::text, 8, '0'), 'noop', 'default', '{{}}', %(status)s, %(priority)s,
  %(attempts)s, 3, %(run_at)s + g, %(now)s, %(now)s, %(done)s, %(done)s, %(worker)s
FROM generate_series(1, %(n)s) g
"""
_SQLITE_ROWS = """
WITH RECURSIVE n(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM n WHERE g < :n)
INSERT INTO jobs (id, type, queue, payload, status, priority, attempts, max_attempts,
  run_at, created_at, updated_at, claimed_at, completed_at, locked_by)
SELECT :prefix || printf('%08d', g), 'noop', 'default', '{}', :status, :priority,
  :attempts, 3, :run_at + g, :now, :now, :done, :done, :worker FROM n
"""


def load_rows(storage: Any, *, finished: int, not_due: int) -> None:
    """`finished` completed rows and `not_due` scheduled ones (priority 10, due tomorrow)."""
    now = storage.now()
    done = {"status": "completed", "priority": 0, "attempts": 1, "run_at": now - finished}
    done.update(done=now, worker="load", prefix="done-", n=finished)
    later = {"status": "scheduled", "priority": 10, "attempts": 0, "run_at": now + 86_400_000}
    later.update(done=None, worker=None, prefix="later-", n=not_due)
    for rows in (done, later):
        if not rows["n"]:
            continue
        if hasattr(storage, "schema"):
            with psycopg.connect(storage.target.conninfo, autocommit=True) as conn:
                conn.execute("SET synchronous_commit = off")
                conn.execute(_PG_ROWS.format(s=storage.schema), {**rows, "now": now})
        else:
            with storage.transaction() as conn:
                conn.execute(_SQLITE_ROWS, {**rows, "now": now})


def claim_ms(storage: Any, claims: int) -> float:
    """Median ms of one claim of one job (each completed afterwards, not timed)."""
    storage.insert(_new_jobs(claims))
    spent = []
    for _ in range(claims):
        began = time.perf_counter()
        _, [job] = storage.commit_batch([], worker="w", claim_limit=1, lease_ms=60_000)
        spent.append(time.perf_counter() - began)
        storage.record([Completed(Lease.of(job), None)])
    return statistics.median(spent) * 1000


def claim_buffers(storage: Any) -> float:
    """Shared buffers one claim of one job touches (promotion + claim, rolled back): the
    work a claim does, which the machine's load does not blur."""
    from jobcore_postgres.statements import claim_statement, promote_statement

    storage.insert(_new_jobs(1))
    d = storage._d
    params = storage._params(worker="w", limit=1, lease_ms=60_000, start=1, queues=[], types=[])
    touched = 0
    with storage._pool.connection() as conn:  # the store's own session settings
        conn.execute("BEGIN")
        for sql in (promote_statement(d, 1000), claim_statement(d, False, False)):
            plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params)
            top = plan.fetchone()[0][0]["Plan"]  # type: ignore[index]
            touched += top["Shared Hit Blocks"] + top["Shared Read Blocks"]
        conn.execute("ROLLBACK")
    return float(touched)


def flat_claim(db: str, finished: int, not_due: int, claims: int) -> tuple[float, float]:
    """(ms per claim, buffers per claim) beside `finished` and `not_due` rows."""
    storage = _storage(db)
    try:
        load_rows(storage, finished=finished, not_due=not_due)
        return claim_ms(storage, claims), claim_buffers(storage)
    finally:
        storage.close()


_SIZES = (
    ("jobs rows", "rows", "(SELECT count(*) FROM {s}.jobs)"),
    ("jobs table + indexes", "MB", "pg_total_relation_size('{s}.jobs')"),
    ("jobs indexes", "MB", "pg_indexes_size('{s}.jobs')"),
    ("jobs_claim index", "MB", "pg_relation_size('{s}.jobs_claim')"),
    ("events rows", "rows", "(SELECT count(*) FROM {s}.events)"),
    ("events table + indexes", "MB", "pg_total_relation_size('{s}.events')"),
)


def sizes(storage: Any) -> list[tuple[str, str, float]]:
    """Rows and MB of the jobs table, its indexes, its claim index and the events table."""
    query = ", ".join(expr.format(s=storage.schema) for _, _, expr in _SIZES)
    with psycopg.connect(storage.target.conninfo) as conn:
        row = conn.execute(f"SELECT {query}").fetchone()
    assert row is not None
    return [
        (name, unit, value / 2**20 if unit == "MB" else value)
        for (name, unit, _), value in zip(_SIZES, row, strict=True)
    ]


def _retrying(call: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """`call`, again after a transient error (other sessions restart this shared server)."""
    for _ in range(30):
        try:
            return call(*args, **kwargs)
        except (TransientStorageError, psycopg.OperationalError) as exc:
            print(f"retrying after: {exc}", file=sys.stderr)
            time.sleep(1)
    return call(*args, **kwargs)


def churn(db: str, n: int, prune: bool) -> dict[str, float]:
    """Put `n` jobs through enqueue, claim and complete; with `prune`, as a deployment would:
    finished jobs pruned and the tables vacuumed each 5% of the run, old events swept."""
    storage = _storage(db, event_retention_ms=0)
    began = time.perf_counter()
    done = pruned = 0
    prune_every = max(n // PRUNE_EVERY, 1)
    while done < n:
        _retrying(storage.insert, _new_jobs(min(ENQUEUE_BATCH, n - done)))
        outcomes: list[Completed] = []
        while True:
            _, jobs = _retrying(
                storage.commit_batch,
                outcomes,
                worker="w",
                claim_limit=CLAIM_BATCH,
                lease_ms=60_000,
            )
            outcomes = [Completed(Lease.of(job), None) for job in jobs]
            done += len(jobs)
            if prune:
                _retrying(storage.sweep, force=True)  # drops events older than retention
            if not jobs:
                break
            if prune and done // prune_every > pruned:
                pruned = done // prune_every
                _retrying(lambda: storage.prune(before=storage.now() + 1))
                _retrying(vacuum, storage)
    seconds = time.perf_counter() - began
    storage.close()
    return {"seconds": seconds, "jobs": done}


def vacuum(storage: Any) -> float:
    """Seconds of a manual `VACUUM` of the jobs and events tables."""
    began = time.perf_counter()
    with psycopg.connect(storage.target.conninfo, autocommit=True) as conn:
        conn.execute(f"VACUUM {storage.schema}.jobs, {storage.schema}.events")
    return time.perf_counter() - began


def _prune_all(storage: Any) -> float:
    """Seconds to prune every finished job, then every event (sweeps of bounded batches)."""
    with psycopg.connect(storage.target.conninfo) as conn:
        row = conn.execute(f"SELECT count(*) FROM {storage.schema}.events").fetchone()
    assert row is not None
    began = time.perf_counter()
    storage.prune(before=storage.now() + 1)
    for _ in range(int(row[0]) // EVENT_PRUNE_BATCH + 1):
        storage.sweep(force=True)
    return time.perf_counter() - began


def run(scale: Scale, stores: Any, results: Any) -> None:
    """Add the flat-claim and churn rows to `results` (`benchmarks.postgres` stores/results)."""
    add = results.add
    print("scale: flat claim", file=sys.stderr)
    for finished in scale.finished:
        name = f"claim, {finished:,} finished + {scale.not_due:,} not due"
        ms, touched = _retrying(  # after a server restart, again on a fresh store
            lambda n=finished: flat_claim(stores.fresh("postgres"), n, scale.not_due, scale.claims)
        )
        add(name, "jobcore-postgres", "ms/claim", ms)
        add(f"{name}, buffers touched", "jobcore-postgres", "buffers/claim", touched)
        storage = _storage(stores.fresh("sqlite"))
        try:
            load_rows(storage, finished=finished, not_due=scale.not_due)
            add(name, "jobcore-sqlite", "ms/claim", claim_ms(storage, scale.claims))
        finally:
            storage.close()
    print(f"scale: churn of {scale.churn:,} jobs, with and without pruning", file=sys.stderr)
    variants = {PRUNED: stores.fresh("postgres"), KEPT: stores.fresh("postgres")}
    for label, db in variants.items():
        storage = _retrying(_storage, db)
        _measure(results, scale, storage, f"start ({label})")
        storage.close()
    from benchmarks.postgres import ROOT, _env

    procs = {  # both at once: one process each
        label: subprocess.Popen(
            [sys.executable, "-m", "benchmarks.pg_scale", "churn", db, str(scale.churn), label],
            stdout=subprocess.PIPE,
            cwd=ROOT,
            env=_env(),
        )
        for label, db in variants.items()
    }
    for label, proc in procs.items():
        out, _ = proc.communicate(timeout=3600)
        if proc.returncode != 0:
            raise RuntimeError(f"churn ({label}) failed")
        report = json.loads(out.decode().strip().splitlines()[-1])
        add(
            f"churn of {scale.churn:,} jobs ({label})",
            "jobcore-postgres",
            "jobs/s",
            report["jobs"] / report["seconds"],
        )
    storage = _retrying(_storage, variants[PRUNED])
    _measure(results, scale, storage, f"after churn ({PRUNED})")
    storage.close()
    storage = _retrying(_storage, variants[KEPT], event_retention_ms=0)
    _measure(results, scale, storage, f"after churn ({KEPT})")
    add(
        f"prune all, then sweep events ({KEPT})",
        "jobcore-postgres",
        "s",
        _retrying(_prune_all, storage),
    )
    _measure(results, scale, storage, f"after churn ({KEPT}), pruned, not vacuumed")
    add(f"VACUUM jobs, events ({KEPT})", "jobcore-postgres", "s", _retrying(vacuum, storage))
    _measure(results, scale, storage, f"after churn ({KEPT}), pruned, then VACUUM")
    storage.close()


def _measure(results: Any, scale: Scale, storage: Any, when: str) -> None:
    for name, unit, value in _retrying(sizes, storage):
        results.add(f"{name}, {when}", "jobcore-postgres", unit, value)
    ms = _retrying(claim_ms, storage, scale.claims)
    results.add(f"claim, {when}", "jobcore-postgres", "ms/claim", ms)
    touched = _retrying(claim_buffers, storage)
    results.add(f"claim, {when}, buffers touched", "jobcore-postgres", "buffers/claim", touched)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "churn":
        db, n, label = args[1:]
        print(json.dumps(churn(db, int(n), prune=label == PRUNED)))
        return
    from benchmarks.postgres import ROOT, Results, Stores

    parser = argparse.ArgumentParser(prog="python -m benchmarks.pg_scale")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--server", default=SERVER)
    options = parser.parse_args(args)
    scale = QUICK if options.quick else FULL
    results = Results()
    began = time.time()
    with tempfile.TemporaryDirectory(dir=Path.home()) as tmp:
        stores = Stores(options.server, Path(tmp))
        try:
            run(scale, stores, results)
        finally:
            stores.drop()
    lines = [
        f"{time.time() - began:.0f}s.",
        "",
        "| measurement | system | median | min-max |",
        "|---|---|---|---|",
    ]
    for row in results.rows.values():
        lines.append(
            f"| {row.name} | {row.system} | {row.median:,.1f} {row.unit} | "
            f"{min(row.values):,.1f}-{max(row.values):,.1f} |"
        )
    text = "\n".join(lines)
    name = "pg-scale-quick.md" if options.quick else "pg-scale.md"
    (ROOT / "benchmarks" / "results" / name).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
