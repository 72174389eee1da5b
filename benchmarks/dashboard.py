"""Dashboard latency with a million jobs: `python -m benchmarks.dashboard [--jobs N]`.

Builds a store of N jobs (default 1M: mostly completed over the last day, some
failed with a few error signatures, a backlog of pending and scheduled jobs,
a few thousand claimed), serves the dashboard from another process, signs in
and times each page over HTTP on 127.0.0.1 (keep-alive, one client): p50 and
p95 per page. Then it times the overview again while a writer commits jobs
(the counts are recounted in the background, never per request). Asserts
nothing; the target is the jobs page and the overview at p95 <= 300 ms.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

TYPES = ["noop", "shell", "create_file", "claude_extraction", "sync_aws", "report"]
QUEUES = ["default", "mail", "reports", "batch"]
WORKERS = [f"host-{n}:{1000 + n}" for n in range(8)]
ERRORS = [
    "ConnectionError: timeout to db-{n}.internal:5432 after 30s",
    "exit code {n}: permission denied writing /srv/out/{n}.txt",
    "RateLimited: retry after {n} seconds",
]
TARGET_MS = 300.0


def uuid7(ms: int, rng: random.Random) -> str:
    value = (
        (ms << 80) | (0x7 << 76) | (rng.getrandbits(12) << 64) | (0b10 << 62) | rng.getrandbits(62)
    )
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def build(db: Path, n: int, seed: int = 7) -> None:
    """N jobs written straight into a migrated store (fast; the shapes the API would write)."""
    import apsw

    from jobcore import Queue

    with Queue(str(db)) as queue:
        queue.storage.migrate()
    rng = random.Random(seed)
    now = int(time.time() * 1000)
    day = 86_400_000
    conn = apsw.Connection(str(db))
    conn.execute("PRAGMA synchronous=OFF")

    def rows() -> Any:
        for index in range(n):
            roll = rng.random()
            created = now - int(day * (1 - index / n)) - 1000
            job_type = (
                TYPES[0] if roll < 0.5 else rng.choice(TYPES[:5]) if roll < 0.999 else "report"
            )
            queue = rng.choice(QUEUES)
            payload = json.dumps({"n": index, "note": "needle" if index % 50_000 == 7 else "hay"})
            status, attempts, run_at = "completed", 1, created
            claimed = completed = locked_by = lease = error = None
            errors = "[]"
            point = rng.random()
            if point < 0.04:
                status, attempts = "failed", 3
                message = rng.choice(ERRORS).format(n=rng.randint(1, 999))
                error = message
                errors = json.dumps(
                    [
                        {
                            "attempt": a,
                            "error": message,
                            "worker": rng.choice(WORKERS),
                            "at": created + a * 1000,
                        }
                        for a in (1, 2, 3)
                    ]
                )
            elif point < 0.05:
                status, attempts = "cancelled", 0
            elif point < 0.08:
                status, attempts = "pending", 0
            elif point < 0.095:
                status, attempts, run_at = "scheduled", 0, now + rng.randint(60_000, day)
            elif point < 0.1:
                status = "claimed"
            if status in ("completed", "failed", "claimed"):
                claimed = created + rng.randint(10, 5000)
                locked_by = rng.choice(WORKERS)
            if status in ("completed", "failed", "cancelled"):
                completed = min((claimed or created) + rng.randint(1, 60_000), now)
            if status == "claimed":
                lease = now + 60_000 if rng.random() > 0.01 else now - 5_000
            yield (
                uuid7(created, rng),
                job_type,
                queue,
                payload,
                status,
                attempts,
                run_at,
                locked_by,
                claimed,
                lease,
                error,
                errors,
                completed,
                created,
                completed or claimed or created,
            )

    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO jobs (id, type, queue, payload, status, priority, attempts, max_attempts, "
        "run_at, timeout_ms, locked_by, claimed_at, locked_at, lease_expires_at, heartbeat_at, "
        "last_error, errors, completed_at, created_at, updated_at, cancel_requested, meta) "
        "VALUES (?1, ?2, ?3, ?4, ?5, 0, ?6, 3, ?7, NULL, ?8, ?9, ?9, ?10, ?9, ?11, ?12, ?13, ?14, "
        "?15, 0, '{}')",
        rows(),
    )
    conn.execute("COMMIT")
    conn.close()


class Client:
    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.cookie = ""

    def request(self, method: str, path: str, body: str | None = None) -> tuple[int, bytes, float]:
        headers = {"Cookie": self.cookie} if self.cookie else {}
        if body is not None:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        started = time.perf_counter()
        self.conn.request(method, path, body=body, headers=headers)
        answer = self.conn.getresponse()
        data = answer.read()
        took = (time.perf_counter() - started) * 1000
        cookie = answer.getheader("set-cookie")
        if cookie:
            self.cookie = cookie.split(";", 1)[0]
        return answer.status, data, took


def percentiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return statistics.median(ordered), p95


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=40, help="timed requests per page")
    parser.add_argument("--dir", type=Path, default=None, help="folder for the database")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="jobcore-dashboard-", dir=args.dir))
    db = folder / "jobs.db"
    try:
        started = time.perf_counter()
        build(db, args.jobs)
        print(
            f"built {args.jobs} jobs in {time.perf_counter() - started:.1f}s ({db.stat().st_size / 1e6:.0f} MB)"
        )
        run(db, args)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run(db: Path, args: argparse.Namespace) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = dict(os.environ, XDG_STATE_HOME=str(db.parent / "state"), JOBCORE_DB=str(db))
    jobcore = [sys.executable, "-m", "jobcore"]
    token = subprocess.run(
        [*jobcore, "tokens", "create", "--name", "bench", "--scope", "admin"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    log = db.parent / "serve.log"
    with open(log, "wb") as sink:
        server = subprocess.Popen(
            [*jobcore, "serve", "--port", str(port)], env=env, stdout=sink, stderr=sink
        )
    try:
        deadline = time.monotonic() + 120
        while True:
            client = Client(port)
            try:
                client.request("GET", "/api/health")
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(
                        f"jobcore serve did not start: {log.read_text()[-2000:]}"
                    ) from None
                time.sleep(0.2)
        status, _, _ = client.request("POST", "/ui/login", urlencode({"token": token, "next": "/"}))
        assert status == 303, status
        _, _, cold = client.request("GET", "/")
        print(f"first overview (outstanding work counted from indexes): {cold:.0f} ms")
        started = time.perf_counter()
        while b"data-pending-refresh" in client.request("GET", "/")[1]:
            time.sleep(0.5)  # the whole-store count (finished by type, charts) runs meanwhile
        print(
            f"whole-store count in the background: ready after {time.perf_counter() - started:.1f}s"
        )
        _, first_page, _ = client.request("GET", "/ui/jobs")
        cursor = first_page.decode().split('data-job-id="')[50].split('"')[0]
        pages = {
            "overview": "/",
            "jobs": "/ui/jobs",
            "jobs, older page": f"/ui/jobs?cursor={cursor}",
            "jobs status=failed": "/ui/jobs?status=failed",
            "jobs status=pending type=shell": "/ui/jobs?status=pending&type=shell",
            "jobs type=report (0.1%)": "/ui/jobs?type=report",
            "jobs search q=needle": "/ui/jobs?q=needle",
            "job": f"/ui/jobs/{cursor}",
            "workers": "/ui/workers",
            "dead letters": "/ui/dead-letters",
        }
        rows = []
        for name, path in pages.items():
            for _ in range(3):
                client.request("GET", path)
            times = []
            for _ in range(args.requests):
                status, _, took = client.request("GET", path)
                assert status == 200, (path, status)
                times.append(took)
            p50, p95 = percentiles(times)
            rows.append((name, p50, p95))
        rows.append(
            ("overview, writer committing", *overview_while_writing(client, db, args.requests))
        )
        print(f"\n{'page':34} {'p50 ms':>8} {'p95 ms':>8}")
        for name, p50, p95 in rows:
            mark = (
                ""
                if not name.startswith(("overview", "jobs"))
                else ("  ok" if p95 <= TARGET_MS else "  MISS")
            )
            print(f"{name:34} {p50:8.1f} {p95:8.1f}{mark}")
    finally:
        server.terminate()
        server.wait(timeout=30)


def overview_while_writing(client: Client, db: Path, n: int) -> tuple[float, float]:
    """The overview while another thread enqueues a job every 20 ms."""
    from jobcore import Queue

    stop = threading.Event()

    def writer() -> None:
        with Queue(str(db)) as queue:
            while not stop.is_set():
                queue.enqueue("noop", {})
                time.sleep(0.02)

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        times = []
        for _ in range(n):
            _, _, took = client.request("GET", "/")
            times.append(took)
            time.sleep(0.05)
        return percentiles(times)
    finally:
        stop.set()
        thread.join()


if __name__ == "__main__":
    main()
