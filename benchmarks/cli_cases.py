"""What users run: `jobcore run --until-empty` beside `Worker(...).run()`, plugins, events, filtered claims.

Drain rates here come from the database itself (jobs / (last `completed_at` -
first `claimed_at`)), the same measure for the CLI and the library, so a
process's imports and plugin loading are not counted as draining; the CLI's
start-up (spawn to first claim) is reported on its own.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw

from benchmarks.cases import ROOT, fresh, raw_connection
from benchmarks.proc import jobcore_queue
from jobcore.ids import new_id
from jobcore.storage.sqlite import SQLiteStorage
from jobcore.timeutil import now_ms


def otel_available() -> bool:
    """The `otel` extra is installed (the `all` extra), so its rows can run."""
    return all(
        importlib.util.find_spec(name) is not None
        for name in ("jobcore_otel", "opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http")
    )


def cli_command() -> list[str]:
    """The `jobcore` console script of this interpreter's environment."""
    script = Path(sys.executable).with_name("jobcore")
    return [str(script)] if script.exists() else [sys.executable, "-m", "jobcore"]


def user_env(**extra: str) -> dict[str, str]:
    """This environment without JOBCORE_* and OTEL_* settings, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOBCORE_", "OTEL_"))}
    env.update(extra)
    return env


def drain_db(tmp: Path, name: str, n: int) -> str:
    """A FULL database holding `n` pending `noop` jobs (no trace context)."""
    path = fresh(tmp, name)
    queue = jobcore_queue(path, "FULL")
    for start in range(0, n, 5000):
        queue.enqueue_many("noop", [{}] * min(5000, n - start))
    queue.close()
    return path


def traced_drain_db(tmp: Path, name: str, n: int, **otel: str) -> str:
    """Like `drain_db`, enqueued by a producer process with the `otel` settings (jobs carry meta.otel)."""
    path = fresh(tmp, name)
    env = user_env(
        **otel,
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    )
    subprocess.run(
        [sys.executable, "-m", "benchmarks.proc", "enqueue", path, str(n)],
        env=env,
        cwd=ROOT,
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=1800,
    )
    return path


@dataclass
class Drained:
    rate: float  # jobs/s from the database's first claim to its last completion
    first_claim: float  # epoch seconds
    cpu_per_job: float = float("nan")  # µs of the process's CPU per job, start-up taken out
    log_lines: int = 0
    startup: float = float("nan")  # seconds from spawning the process to its first claim


def drained(path: str, n: int) -> Drained:
    conn = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        count, first, last = conn.execute(
            "SELECT count(*), min(claimed_at), max(completed_at) FROM jobs WHERE status = 'completed'"
        ).fetchone()
    finally:
        conn.close()
    if count != n:
        raise RuntimeError(f"drain completed {count} of {n} jobs")
    seconds = max(last - first, 1) / 1000
    return Drained(rate=n / seconds, first_claim=first / 1000)


def cpu_seconds(cmd: list[str], env: dict[str, str], log_path: Path) -> float:
    """Run `cmd` to its end (stderr to `log_path`); the user+system CPU seconds it used."""
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log)
        killer = threading.Timer(1800, proc.kill)
        killer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            killer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(cmd[:4])} exited {proc.returncode}: {log_path.read_text()[-2000:]}"
        )
    return usage.ru_utime + usage.ru_stime


def _measure(tmp: Path, path: str, n: int, command: list[str], env: dict[str, str]) -> Drained:
    """Drain `path` with `command` (DB PATH substituted); CPU net of an empty database's run."""
    log_path = tmp / "drain.log"
    empty = fresh(tmp, "empty.db")
    idle = cpu_seconds([empty if part == "DB" else part for part in command], env, log_path)
    spawned = time.time()
    busy = cpu_seconds([path if part == "DB" else part for part in command], env, log_path)
    result = drained(path, n)
    result.cpu_per_job = max(busy - idle, 0.0) / n * 1e6
    result.log_lines = log_path.read_text().count("\n")
    result.startup = result.first_claim - spawned
    return result


def library_drain(tmp: Path, n: int, threads: int, path: str | None = None) -> Drained:
    """`Worker(queue, concurrency=threads, until_empty=True).run()` in its own process."""
    path = path or drain_db(tmp, "lib-drain.db", n)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    command = [sys.executable, "-m", "benchmarks.proc", "drain", "DB", "FULL", str(threads), "0"]
    return _measure(tmp, path, n, command, env)


def cli_drain(tmp: Path, path: str, n: int, threads: int, **env: str) -> Drained:
    """`jobcore --db PATH run --until-empty --concurrency N`, default text logs to a file.

    The result's `startup` is the seconds from spawning it to its first claim.
    """
    command = [*cli_command(), "--db", "DB", "run", "--until-empty", "--concurrency", str(threads)]
    return _measure(tmp, path, n, command, user_env(**env))


def otel_hooks(**env: str) -> int | None:
    """How many hooks `jobcore plugins --json` lists for the otel plugin (None: not loaded)."""
    out = subprocess.run(
        [*cli_command(), "plugins", "--json"],
        env=user_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    for info in json.loads(out):
        if info["name"] == "otel" and info["status"] == "loaded":
            return len(info["hooks"])
    return None


# -- events ----------------------------------------------------------------------


def event_triggers(path: str) -> list[str]:
    """Names of the triggers that append to an `events` table (the store's event recording)."""
    conn = apsw.Connection(path)
    try:
        rows = list(conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'"))
    finally:
        conn.close()
    return [name for name, sql in rows if "insert into events" in " ".join(sql.lower().split())]


def drop_event_triggers(path: str) -> int:
    """Stop recording events in this benchmark database only; returns how many triggers went."""
    names = event_triggers(path)
    conn = apsw.Connection(path)
    try:
        for name in names:
            conn.execute(f'DROP TRIGGER "{name}"')
    finally:
        conn.close()
    return len(names)


def events_supported(tmp: Path) -> bool:
    """Whether this store records events (a migrated database has event triggers)."""
    path = fresh(tmp, "events-probe.db")
    storage = SQLiteStorage(path)
    storage.migrate()
    storage.close()
    return bool(event_triggers(path))


# -- claims filtered by queue ------------------------------------------------------------


def claim_one(storage: SQLiteStorage, queues: tuple[str, ...] = ()) -> None:
    """Claim one job (with or without the pre-v2 `now` argument)."""
    kwargs: dict[str, Any] = {"worker": "bench", "limit": 1, "lease_ms": 60_000, "queues": queues}
    if "now" in inspect.signature(storage.claim).parameters:
        kwargs["now"] = now_ms()
    if len(storage.claim(**kwargs)) != 1:
        raise RuntimeError("the claim found no job")


def filtered_claim_cost(tmp: Path, other_pending: int, claims: int = 2000) -> float:
    """Microseconds per claim on queue B while `other_pending` higher-priority jobs wait in A."""
    path = fresh(tmp, f"claim-queue-{other_pending}.db")
    conn = raw_connection(path, "OFF")
    now = now_ms()
    insert = (
        "INSERT INTO jobs (id, type, queue, payload, status, priority, attempts, max_attempts,"
        " run_at, created_at, updated_at) VALUES (?, 'noop', ?, '{}', 'pending', ?, 0, 3, ?, ?, ?)"
    )
    conn.execute("BEGIN IMMEDIATE")
    for start in range(0, other_pending, 50_000):
        count = min(50_000, other_pending - start)
        conn.executemany(insert, [(new_id(), "A", 10, now, now, now) for _ in range(count)])
    conn.executemany(insert, [(new_id(), "B", 0, now, now, now) for _ in range(claims)])
    conn.execute("COMMIT")
    conn.close()
    storage = SQLiteStorage(path, synchronous="FULL")
    spent = 0.0
    with storage.transaction():  # CPU of the statement, not the fsync
        for _ in range(claims):
            start = time.perf_counter()
            claim_one(storage, ("B",))
            spent += time.perf_counter() - start
    storage.close()
    return spent / claims * 1e6
