"""Real worker processes on one PostgreSQL store: races, kill -9, and a server restart."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jobcore_postgres.storage import PostgresStorage
from pg_testing import unavailable
from testenv import subprocess_env, wait_for

from jobcore.errors import StorageError

JOBCORE = [sys.executable, "-m", "jobcore"]


class Cluster:
    """`jobcore` commands and worker processes against one PostgreSQL store."""

    def __init__(self, tmp_path: Path, url: str) -> None:
        self.tmp = tmp_path
        self.url = url
        self.env = subprocess_env(JOBCORE_DB=url)
        self.workers: list[subprocess.Popen[bytes]] = []
        self.storage = PostgresStorage(url)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*JOBCORE, *args],
            env=self.env,
            cwd=self.tmp,
            capture_output=True,
            text=True,
            timeout=300,
        )

    def enqueue_lines(self, payloads: list[dict[str, Any]], job_type: str = "record") -> None:
        path = self.tmp / "jobs.jsonl"
        path.write_text("".join(json.dumps(p) + "\n" for p in payloads))
        done = self.cli("enqueue", job_type, "--from", str(path))
        assert done.returncode == 0, done.stderr

    def worker(self, *options: str) -> subprocess.Popen[bytes]:
        with open(self.tmp / f"worker{len(self.workers)}.log", "wb") as log:
            proc = subprocess.Popen(
                [*JOBCORE, "run", *options],
                env=self.env,
                cwd=self.tmp,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.workers.append(proc)
        return proc

    def logs(self) -> str:
        return "\n".join(
            p.read_text(errors="replace")[-3000:] for p in self.tmp.glob("worker*.log")
        )

    def counts(self) -> dict[str, int]:
        try:
            return self.storage.count_by_status()
        except StorageError:  # the server is restarting
            return {}

    def stop_all(self) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.storage.close()


@pytest.fixture
def cluster(tmp_path: Path, pg_url: str) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path, pg_url)
    yield cluster
    cluster.stop_all()


def _runs(log: Path) -> list[tuple[str, int, str]]:
    lines = log.read_text().split("\n") if log.exists() else []
    return [(i, int(a), w) for i, a, w in (line.split() for line in lines if line)]


@pytest.mark.stress
def test_four_workers_drain_twenty_thousand_jobs_each_once(cluster: Cluster) -> None:
    total = 20_000
    log = cluster.tmp / "runs.log"
    cluster.enqueue_lines([{"log": str(log)}] * total)
    procs = [cluster.worker("--until-empty", "--concurrency", "8") for _ in range(4)]
    for proc in procs:
        assert proc.wait(300) == 0, cluster.logs()
    runs = _runs(log)
    ids = Counter(job_id for job_id, _, _ in runs)
    assert len(ids) == total and set(ids.values()) == {1}  # every job ran, and ran once
    assert {attempt for _, attempt, _ in runs} == {1}
    assert cluster.storage.count_by_status() == {"completed": total}
    _assert_claimed_once_but_given_back(cluster, total)
    assert len({w for _, _, w in runs}) >= 2  # the processes shared the work


def _assert_claimed_once_but_given_back(cluster: Cluster, total: int) -> None:
    """Every job's claims all ended in its completion but those it was given back unrun.

    A worker gives back prefetched jobs that waited `prefetch_wait` for an executor
    (a loaded machine starves them): released unstarted, the attempt given back, and
    claimed again. That is the only second claim allowed: never two claims at once,
    never a claim that ended otherwise (swept, rolled back, lost).
    """
    events = cluster.storage.events_after(0, 10 * total)
    claims = Counter(e.job_id for e in events if e.kind == "job:claimed")
    given_back = Counter(e.job_id for e in events if e.kind == "job:released")
    assert len(claims) == total
    assert all(claims[i] == given_back[i] + 1 for i in claims), "claimed twice"
    expiry = {  # lease id -> when that claim's lease was to expire
        e.data["job"]["lease_id"]: e.data["job"]["lease_expires_at"]
        for e in events
        if e.kind == "job:claimed" and e.job_id in given_back and e.data
    }
    for job_id in given_back:
        job = cluster.storage.get(job_id)
        assert job is not None and job.attempts == 1, job
        *before, last = job.history
        assert last["outcome"] == "completed" and last["attempt"] == 1, job.history
        assert len(before) == given_back[job_id], job.history
        for entry in before:  # given back unrun by its worker, not swept after its lease
            assert entry["outcome"] == "released" and entry["started_at"] is None, entry
            assert entry["ended_at"] < expiry[entry["lease_id"]], entry


def test_sigkilled_worker_job_is_reclaimed_elsewhere(cluster: Cluster) -> None:
    marker = cluster.tmp / "started"
    done = cluster.cli("enqueue", "sleepy", json.dumps({"seconds": 1.0, "started": str(marker)}))
    job_id = done.stdout.strip()
    first = cluster.worker("--lease", "1s", "--worker-id", "first")
    wait_for(marker.exists, 30)
    time.sleep(0.3)  # its start is committed (within 50 ms of the handler beginning)
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    job = cluster.storage.get(job_id)
    assert job is not None and job.status == "claimed" and job.locked_by == "first"
    second = cluster.worker("--lease", "1s", "--worker-id", "second")
    wait_for(lambda: cluster.counts().get("completed") == 1, timeout=60)
    second.send_signal(signal.SIGTERM)
    assert second.wait(30) == 0
    job = cluster.storage.get(job_id)
    assert job is not None and job.attempts == 2 and job.locked_by == "second"
    assert [entry["error"] for entry in job.errors] == ["lease expired"]
    assert [h["outcome"] for h in job.history] == ["reclaimed", "completed"]


def _restart_command() -> list[str]:
    versions = sorted(os.listdir("/etc/postgresql")) if os.path.isdir("/etc/postgresql") else []
    tool = shutil.which("pg_ctlcluster")
    if not versions or tool is None or os.geteuid() != 0:
        unavailable("restarting the server needs pg_ctlcluster, a local cluster, and root")
    return [tool, "--skip-systemctl-redirect", versions[-1], "main", "restart"]


@pytest.mark.slow
def test_server_restart_mid_drain_loses_nothing(cluster: Cluster) -> None:
    restart = _restart_command()
    total = 3000
    log = cluster.tmp / "runs.log"
    cluster.enqueue_lines([{"log": str(log), "sleep": 0.005}] * total)
    procs = [cluster.worker("--concurrency", "4", "--lease", "5s") for _ in range(2)]
    wait_for(lambda: cluster.counts().get("completed", 0) >= 300, timeout=120)
    try:
        subprocess.run(restart, check=True, capture_output=True, timeout=120)
    finally:  # whatever happened, leave the machine's server running for everything after
        subprocess.run([*restart[:-1], "start"], capture_output=True, timeout=120)
    after_restart = cluster.counts()  # the storage reconnects too
    assert after_restart.get("completed", 0) < total  # the restart came mid-drain
    wait_for(lambda: cluster.counts() == {"completed": total}, timeout=240)
    assert all(proc.poll() is None for proc in procs), cluster.logs()  # they carried on
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, cluster.logs()
    ran = {job_id for job_id, _, _ in _runs(log)}
    assert len(ran) == total  # at least once each; none lost
