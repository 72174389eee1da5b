"""The measurements. Each function runs one repetition on a fresh database file and returns numbers."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import apsw

from benchmarks.proc import jobcore_queue
from jobcore.ids import new_id
from jobcore.storage.sqlite import SQLiteStorage
from jobcore.timeutil import now_ms

ROOT = Path(__file__).resolve().parents[1]


def fresh(tmp: Path, name: str) -> str:
    path = tmp / name
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    return str(path)


def raw_connection(path: str, sync: str) -> apsw.Connection:
    """A plain APSW connection on the jobcore schema with the same pragmas."""
    storage = SQLiteStorage(path)
    storage.migrate()  # the same table and indexes as jobcore's
    storage.close()
    conn = apsw.Connection(path)
    conn.set_busy_timeout(30_000)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={sync}")
    return conn


RAW_INSERT = (
    "INSERT INTO jobs (id, type, queue, payload, status, priority, attempts, max_attempts, run_at,"
    " created_at, updated_at) VALUES (?, 'noop', 'default', '{}', 'pending', 0, 0, 3, ?, ?, ?)"
)
RAW_CLAIM = (
    "UPDATE jobs SET status = 'claimed', attempts = attempts + 1, locked_by = 'raw', claimed_at = ?1,"
    " lease_expires_at = ?1 + 60000 WHERE id IN (SELECT id FROM jobs INDEXED BY jobs_claim"
    " WHERE status = 'pending' ORDER BY priority DESC, run_at, id LIMIT ?2) RETURNING id"
)
RAW_COMPLETE = "UPDATE jobs SET status = 'completed', completed_at = ?, lease_expires_at = NULL WHERE id = ? AND status = 'claimed'"


def _rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


# -- enqueue ------------------------------------------------------------------------


class Timed:
    """Wall-clock seconds and this process's CPU seconds (user + system) of a `with` block.

    The page cache is written out first (`os.sync`): a file written just before (the
    previous row's database, a deleted one) must not be flushed during this row's fsyncs,
    which charged whichever row came first after a large one (issue 19).
    """

    seconds = cpu = 0.0

    def __enter__(self) -> Timed:
        os.sync()
        self._wall, self._cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self._wall
        self.cpu = time.process_time() - self._cpu


def enqueue_figures(timed: Timed, n: int) -> dict[str, float]:
    """An enqueue row's figures: jobs/s and CPU microseconds per job."""
    return {"rate": _rate(n, timed.seconds), "cpu_per_job": timed.cpu / n * 1e6 if n else 0.0}


def jobcore_enqueue(tmp: Path, sync: str, n: int) -> float:
    return jobcore_enqueue_figures(tmp, sync, n)["rate"]


def jobcore_enqueue_figures(tmp: Path, sync: str, n: int) -> dict[str, float]:
    queue = jobcore_queue(fresh(tmp, "jc-enqueue.db"), sync)
    queue.storage.migrate()
    with Timed() as timed:
        for _ in range(n):
            queue.enqueue("noop", {})
    queue.close()
    return enqueue_figures(timed, n)


def raw_enqueue(tmp: Path, sync: str, n: int) -> float:
    return raw_enqueue_figures(tmp, sync, n)["rate"]


def raw_enqueue_figures(tmp: Path, sync: str, n: int) -> dict[str, float]:
    conn = raw_connection(fresh(tmp, "raw-enqueue.db"), sync)
    with Timed() as timed:
        for _ in range(n):
            now = now_ms()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(RAW_INSERT, (new_id(), now, now, now))
            conn.execute("COMMIT")
    conn.close()
    return enqueue_figures(timed, n)


def huey_enqueue(tmp: Path, sync: str, n: int) -> float:
    from benchmarks import huey_app

    huey = huey_app.make_huey(fresh(tmp, "huey-enqueue.db"), sync)
    noop, _ = huey_app.register_tasks(huey)
    with Timed() as timed:
        for _ in range(n):
            noop()
    huey.storage.close()
    return _rate(n, timed.seconds)


def jobcore_batch(tmp: Path, sync: str, n: int, batch: int = 1000) -> float:
    return jobcore_batch_figures(tmp, sync, n, batch)["rate"]


def jobcore_batch_figures(tmp: Path, sync: str, n: int, batch: int = 1000) -> dict[str, float]:
    queue = jobcore_queue(fresh(tmp, "jc-batch.db"), sync)
    queue.storage.migrate()
    with Timed() as timed:
        for _ in range(n // batch):
            queue.enqueue_many("noop", [{}] * batch)
    queue.close()
    return enqueue_figures(timed, n // batch * batch)


def raw_batch(tmp: Path, sync: str, n: int, batch: int = 1000) -> float:
    return raw_batch_figures(tmp, sync, n, batch)["rate"]


def raw_batch_figures(tmp: Path, sync: str, n: int, batch: int = 1000) -> dict[str, float]:
    conn = raw_connection(fresh(tmp, "raw-batch.db"), sync)
    with Timed() as timed:
        for _ in range(n // batch):
            now = now_ms()
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(RAW_INSERT, [(new_id(), now, now, now) for _ in range(batch)])
            conn.execute("COMMIT")
    conn.close()
    return enqueue_figures(timed, n // batch * batch)


# -- drain --------------------------------------------------------------------------


def _run_procs(commands: list[list[str]]) -> list[dict[str, Any]]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
        for cmd in commands
    ]
    reports = []
    for proc in procs:
        out, _ = proc.communicate(timeout=1800)
        if proc.returncode != 0:
            raise RuntimeError(f"benchmark process failed: {' '.join(commands[0][:4])}")
        reports.append(json.loads(out.decode().strip().splitlines()[-1]))
    return reports


def jobcore_drain(
    tmp: Path, sync: str, n: int, processes: int, threads: int
) -> tuple[float, float]:
    """(jobs/s, peak RSS MB of the first worker) for `processes` workers of `threads` executors."""
    path = fresh(tmp, "jc-drain.db")
    queue = jobcore_queue(path, sync)
    for start in range(0, n, 5000):
        queue.enqueue_many("noop", [{}] * min(5000, n - start))
    queue.close()
    start_at = str(time.time() + 0.8)  # after every process has imported jobcore
    cmd = [sys.executable, "-m", "benchmarks.proc", "drain", path, sync, str(threads), start_at]
    reports = _run_procs([cmd] * processes)
    completed = sum(r["completed"] for r in reports)
    if completed != n:
        raise RuntimeError(f"drain completed {completed} of {n} jobs")
    seconds = max(r["end"] for r in reports) - min(r["start"] for r in reports)
    return _rate(n, seconds), reports[0]["rss_mb"]


def raw_drain(tmp: Path, sync: str, n: int, batch: int) -> float:
    """Claim `batch` per transaction, then complete them in a second transaction."""
    conn = raw_connection(fresh(tmp, "raw-drain.db"), sync)
    now = now_ms()
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(RAW_INSERT, [(new_id(), now, now, now) for _ in range(n)])
    conn.execute("COMMIT")
    done = 0
    start = time.perf_counter()
    while done < n:
        conn.execute("BEGIN IMMEDIATE")
        ids = [row[0] for row in conn.execute(RAW_CLAIM, (now_ms(), batch))]
        conn.execute("COMMIT")
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(RAW_COMPLETE, [(now_ms(), job_id) for job_id in ids])
        conn.execute("COMMIT")
        done += len(ids)
    seconds = time.perf_counter() - start
    conn.close()
    return _rate(n, seconds)


def huey_drain(tmp: Path, sync: str, n: int) -> float:
    from benchmarks import huey_app

    path = fresh(tmp, "huey-drain.db")
    huey = huey_app.make_huey(path, sync)
    noop, _ = huey_app.register_tasks(huey)
    for _ in range(n):
        noop()
    huey.storage.close()
    start_at = str(time.time() + 0.8)
    [report] = _run_procs(
        [[sys.executable, "-m", "benchmarks.proc", "huey-drain", path, sync, str(n), start_at]]
    )
    return _rate(n, report["end"] - report["start"])


# -- latency ------------------------------------------------------------------------


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _percentiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * len(ordered)) - 1)]
    return statistics.median(ordered), p99


def _spawn(kind: str, path: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "benchmarks.proc", kind, path],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def jobcore_latency(tmp: Path, k: int, idle_seconds: float) -> tuple[float, float, float]:
    """(p50 ms, p99 ms, idle CPU % of a core) against an idle worker in another process."""
    from benchmarks import plugin

    path = fresh(tmp, "jc-latency.db")
    queue = jobcore_queue(path, "FULL", plugins=(("bench", plugin),))
    queue.storage.migrate()
    worker = _spawn("idle-worker", path)
    try:
        time.sleep(1.0)  # imported, started, idle
        before = _cpu_seconds(worker.pid)
        time.sleep(idle_seconds)
        idle_cpu = (_cpu_seconds(worker.pid) - before) / idle_seconds * 100
        ids = []
        for i in range(k):
            time.sleep(0.01 + (i % 7) * 0.003)  # spaced, so each job meets an idle worker
            ids.append(queue.enqueue("stamp", {"t0": time.time()}).job.id)
        deadline = time.time() + 30
        while time.time() < deadline and queue.storage.count_by_status().get("completed", 0) < k:
            time.sleep(0.05)
        latencies = [queue.get(job_id).result["latency_ms"] for job_id in ids]
    finally:
        _stop(worker)
        queue.close()
    p50, p99 = _percentiles(latencies)
    return p50, p99, idle_cpu


def huey_latency(tmp: Path, k: int) -> tuple[float, float]:
    from benchmarks import huey_app

    path = fresh(tmp, "huey-latency.db")
    huey = huey_app.make_huey(path, "FULL", results=True)
    _, stamp = huey_app.register_tasks(huey)
    consumer = _spawn("huey-consumer", path)
    try:
        time.sleep(1.0)
        results = []
        for i in range(k):
            time.sleep(0.01 + (i % 7) * 0.003)
            results.append(stamp(time.time()))
        latencies = [result.get(blocking=True, timeout=30) for result in results]
    finally:
        _stop(consumer)
    return _percentiles(latencies)


# -- claim cost and memory -------------------------------------------------------------


def claim_cost(tmp: Path, finished: int, not_due: int, claims: int = 2000) -> float:
    """Microseconds per claim (CPU of the claim statement inside one transaction, no fsync)."""
    from benchmarks.cli_cases import claim_one

    path = fresh(tmp, f"claim-{finished}-{not_due}.db")
    conn = raw_connection(path, "OFF")
    now = now_ms()
    conn.execute("BEGIN IMMEDIATE")
    for start in range(0, finished, 50_000):
        conn.executemany(
            "INSERT INTO jobs (id, type, queue, payload, status, priority, attempts, max_attempts,"
            " run_at, created_at, updated_at, completed_at, result) VALUES (?, 'noop', 'default', '{}',"
            " 'completed', 0, 1, 3, ?, ?, ?, ?, 'null')",
            [(new_id(), now, now, now, now) for _ in range(min(50_000, finished - start))],
        )
    conn.executemany(
        "INSERT INTO jobs (id, type, queue, payload, status, priority, attempts, max_attempts,"
        " run_at, created_at, updated_at) VALUES (?, 'noop', 'default', '{}', 'scheduled', 10, 0, 3,"
        " ?, ?, ?)",
        [(new_id(), now + 86_400_000, now, now) for _ in range(not_due)],
    )
    conn.executemany(RAW_INSERT, [(new_id(), now, now, now) for _ in range(claims)])
    conn.execute("COMMIT")
    conn.close()
    storage = SQLiteStorage(path, synchronous="FULL")
    spent = 0.0
    with storage.transaction():
        for _ in range(claims):
            start = time.perf_counter()
            claim_one(storage)
            spent += time.perf_counter() - start
    storage.close()
    return spent / claims * 1e6
