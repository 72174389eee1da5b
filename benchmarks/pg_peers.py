"""Runs the peer queues of `benchmarks.postgres` (procrastinate, pgqueuer, Oban for Python,
the raw LISTEN/NOTIFY floor), each as subprocesses of its own module in `benchmarks/peers/`.

Each measurement gets a fresh schema in the run's database, the peer installs its
own tables there, and every number comes back as one JSON line. A peer that is
not installed, or fails, is recorded with the reason; the run goes on.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

import psycopg

from benchmarks.cases import _percentiles, _stop

ROOT = Path(__file__).resolve().parent.parent
# Oban for Python needs Python >= 3.12: its own environment, made by `python -m benchmarks.setup_peers`.
OBAN_VENV = Path(
    os.environ.get("JOBCORE_BENCH_OBAN_VENV", Path.home() / ".cache" / "jobcore-bench" / "oban-py")
)


class PeerError(RuntimeError):
    """A peer's subprocess failed; the message ends with its stderr."""


class ServerRestarted(PeerError):
    """PostgreSQL restarted during a measurement: its connections were cut, so it is void."""


T = TypeVar("T")


def with_restarts(dsn: str, what: str, fn: Callable[[], T], attempts: int = 3) -> T:
    """`fn()`, taken again (`attempts` in all) when the server at `dsn` restarted under it:
    other sessions' tests restart the shared server, sometimes twice in a row."""
    for attempt in range(1, attempts + 1):
        server = Server(dsn)  # waits while it is down
        try:
            return fn()
        except Exception as error:
            reason = server.restarted()
            if reason is None or attempt == attempts:
                raise
            print(f"  {what}: {reason} ({error}); again", file=sys.stderr, flush=True)
            time.sleep(5.0)
    raise AssertionError("unreachable")


class Server:
    """Tells whether the server restarted since this was made (its postmaster start time)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.started = ""
        self.wait_up()

    @classmethod
    def when_up(cls, dsn: str) -> Server:
        """Once the server at `dsn` answers (waiting while it restarts)."""
        return cls(dsn)

    def _start_time(self) -> str:
        with psycopg.connect(self.dsn, connect_timeout=5) as conn:
            row = conn.execute("SELECT pg_postmaster_start_time()::text").fetchone()
        return str(row[0]) if row else ""

    def wait_up(self, timeout: float = 300.0) -> None:
        """Return once the server answers again (it is restarting), or raise its error."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.started = self._start_time()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)

    def restarted(self) -> str | None:
        """Why the measurement is void, or None."""
        try:
            now = self._start_time()
        except psycopg.OperationalError as error:
            return f"PostgreSQL not reachable during the measurement ({error})".strip()
        return (
            None
            if now == self.started
            else f"PostgreSQL restarted at {now}, during the measurement"
        )


@dataclass(frozen=True)
class Peer:
    name: str
    module: str
    imports: tuple[str, ...]  # modules that must be importable by `python`
    install_hint: str
    oban_venv: bool = False

    @property
    def python(self) -> str:
        return str(OBAN_VENV / "bin" / "python") if self.oban_venv else sys.executable

    def missing(self) -> str | None:
        """Why this peer cannot run here, or None."""
        if self.oban_venv:
            if not Path(self.python).exists():
                return f"not installed ({self.install_hint})"
            probe = subprocess.run(
                [self.python, "-c", "import " + ", ".join(self.imports)],
                capture_output=True,
                text=True,
            )
            return None if probe.returncode == 0 else f"not installed ({self.install_hint})"
        if any(importlib.util.find_spec(name) is None for name in self.imports):
            return f"not installed ({self.install_hint})"
        return None

    def version(self) -> str:
        """`NAME VERSION` of the peer's distribution, as its interpreter has it."""
        ask = f"import importlib.metadata as m; print(m.version({self.imports[0]!r}))"
        probe = subprocess.run([self.python, "-c", ask], capture_output=True, text=True)
        return f"{self.imports[0]} {probe.stdout.strip()}" if probe.returncode == 0 else ""


PROCRASTINATE = Peer(
    "procrastinate",
    "benchmarks.peers.procrastinate_bench",
    ("procrastinate",),
    "pip install procrastinate==3.10.0, or tox -e bench-pg",
)
PGQUEUER = Peer(
    "pgqueuer",
    "benchmarks.peers.pgqueuer_bench",
    ("pgqueuer", "asyncpg"),
    "pip install pgqueuer==1.6.0 asyncpg, or tox -e bench-pg",
)
OBAN = Peer(
    "oban-py",
    "benchmarks.peers.oban_bench",
    ("oban",),
    f"python -m benchmarks.setup_peers: a Python >= 3.12 environment with oban==0.7.0 at {OBAN_VENV}",
    oban_venv=True,
)
RAW_NOTIFY = Peer("raw-notify", "benchmarks.peers.raw_notify", ("psycopg",), "pip install psycopg")
QUEUES = (PROCRASTINATE, PGQUEUER, OBAN)


@dataclass
class Running:
    """A peer subprocess; its stderr goes to a file, so a chatty peer never blocks on a pipe."""

    peer: Peer
    action: str
    proc: subprocess.Popen[str]
    err: IO[str]

    def result(self, timeout: float, server: Server | None = None) -> dict[str, Any]:
        """Its JSON line, or PeerError with the end of its stderr; ServerRestarted as soon
        as `server` was restarted under it (another session's test may restart it)."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            if server is not None and server.restarted():
                self.stop()
                raise ServerRestarted(f"{self.peer.name} {self.action}: {server.restarted()}")
            if time.monotonic() > deadline:
                self.stop()
                raise PeerError(f"{self.peer.name} {self.action}: no answer in {timeout:.0f}s")
            try:
                self.proc.wait(2.0)
            except subprocess.TimeoutExpired:
                continue
        assert self.proc.stdout is not None  # a pipe: one short JSON line, it cannot fill
        out = self.proc.stdout.read()
        self.err.seek(0)
        err = self.err.read()
        self.err.close()
        if self.proc.returncode != 0 or not out.strip():
            tail = " | ".join(err.strip().splitlines()[-3:])
            raise PeerError(f"{self.peer.name} {self.action} exited {self.proc.returncode}: {tail}")
        result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        return result

    def stop(self) -> None:
        if self.proc.poll() is None:
            _stop(self.proc)  # type: ignore[arg-type]
        self.err.close()


def _spawn(peer: Peer, action: str, dsn: str, schema: str, *args: object) -> Running:
    err = tempfile.TemporaryFile("w+")  # noqa: SIM115 - Running closes it
    proc = subprocess.Popen(
        [peer.python, "-m", peer.module, action, dsn, schema, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=err,
        text=True,
        # only the repository root: the peer's interpreter must not see jobcore's plugins
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    )
    return Running(peer, action, proc, err)


def call(
    peer: Peer, action: str, dsn: str, schema: str, *args: object, timeout: float = 1800
) -> dict[str, Any]:
    """Run one action to its end; ServerRestarted if the server restarts meanwhile."""
    server = Server(dsn)
    return _spawn(peer, action, dsn, schema, *args).result(timeout, server)


def prepare(peer: Peer, url: str) -> tuple[str, str]:
    """A new schema for `url` (`...?schema=NAME`) with the peer's tables in it."""
    dsn, schema = url.split("?schema=")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    call(peer, "install", dsn, schema, timeout=120)
    return dsn, schema


def drain(peer: Peer, url: str, n: int, processes: int, concurrency: int = 10) -> float:
    """jobs/s of `processes` workers draining `n` noop jobs, from the first start to the last end."""
    dsn, schema = prepare(peer, url)
    call(peer, "fill", dsn, schema, n)
    server = Server(dsn)
    start_at = time.time() + 1.5  # after the workers' imports
    procs = [_spawn(peer, "drain", dsn, schema, concurrency, start_at) for _ in range(processes)]
    try:
        reports = [proc.result(1800, server) for proc in procs]
    finally:
        for proc in procs:
            proc.stop()
    done = sum(r["completed"] for r in reports)
    if done != n:
        raise PeerError(f"{peer.name} drain completed {done} of {n}")
    seconds = max(float(r["end"]) for r in reports) - min(float(r["start"]) for r in reports)
    return n / seconds


def enqueue(peer: Peer, url: str, n: int, batch: int) -> float:
    """jobs/s enqueueing `n` jobs one per call (`batch` 1) or with the peer's batch API."""
    dsn, schema = prepare(peer, url)
    return n / float(call(peer, "enqueue", dsn, schema, n, batch)["seconds"])


def latency(peer: Peer, url: str, k: int) -> tuple[float, float]:
    """(p50, p99) ms from just before enqueue to the handler's start, worker idle in
    another process, `k` jobs 10-28 ms apart."""
    dsn, schema = prepare(peer, url)
    server = Server(dsn)
    worker = _spawn(peer, "latency-worker", dsn, schema, k)
    try:
        time.sleep(1.5)
        call(peer, "latency-producer", dsn, schema, k, timeout=120)
        values = worker.result(60, server)["latency_ms"]
    finally:
        worker.stop()
    return _percentiles(values)
