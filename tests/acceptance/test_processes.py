"""Real worker processes: SIGKILL, os._exit, SIGTERM and several workers on one database."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from testenv import subprocess_env, wait_for

from jobcore import start_slots
from jobcore.storage.sqlite import SQLiteStorage

JOBCORE = [sys.executable, "-m", "jobcore"]


class Cluster:
    """Runs `jobcore` commands and worker processes against one database file."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.db = tmp_path / "jobs.db"
        self.env = subprocess_env(JOBCORE_DB=str(self.db))
        self.workers: list[subprocess.Popen[bytes]] = []

    def cli(
        self, *args: str, input: str | None = None, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*JOBCORE, *args],
            env={**self.env, **(env or {})},
            cwd=self.tmp,
            input=input,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def enqueue(self, job_type: str, payload: dict[str, Any], *options: str) -> str:
        done = self.cli("enqueue", job_type, json.dumps(payload), *options)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def worker(self, *options: str, **env: str) -> subprocess.Popen[bytes]:
        with open(self.tmp / f"worker{len(self.workers)}.log", "wb") as log:
            proc = subprocess.Popen(
                [*JOBCORE, "run", *options],
                env={**self.env, **env},
                cwd=self.tmp,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.workers.append(proc)
        return proc

    def job(self, job_id: str) -> dict[str, Any]:
        shown = self.cli("show", job_id, "--json")
        assert shown.returncode == 0, shown.stderr
        result: dict[str, Any] = json.loads(shown.stdout)
        return result

    def wait_file(self, path: Path, timeout: float = 20.0) -> None:
        wait_for(path.exists, timeout)

    def stop_all(self) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path)
    yield cluster
    cluster.stop_all()


def test_sigkilled_worker_job_is_reclaimed_and_completed(cluster: Cluster) -> None:
    marker = cluster.tmp / "started"
    # long enough that a loaded machine's slow `jobcore show` polls cannot outlast it
    job_id = cluster.enqueue("sleepy", {"seconds": 6.0, "started": str(marker)})
    first = cluster.worker("--lease", "1s")
    cluster.wait_file(marker)
    # its start was recorded before the handler began: in its executor's start slot
    claimed = cluster.job(job_id)
    assert claimed["lease_id"] in start_slots.read(str(cluster.db), claimed["locked_by"])
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    assert cluster.job(job_id)["status"] == "claimed"  # the dead worker's lease still holds it
    second = cluster.worker("--lease", "1s")
    wait_for(lambda: cluster.job(job_id)["status"] == "completed", timeout=30)
    second.send_signal(signal.SIGTERM)
    assert second.wait(20) == 0
    job = cluster.job(job_id)
    assert job["status"] == "completed" and job["attempts"] == 2
    assert [entry["error"] for entry in job["errors"]] == ["lease expired"]


def test_handler_calling_os_exit_ends_failed_with_history(cluster: Cluster) -> None:
    job_id = cluster.enqueue("crash", {}, "--max-attempts", "2")
    for _ in range(6):
        proc = cluster.worker("--lease", "500ms", "--until-empty")
        code = proc.wait(30)
        if cluster.job(job_id)["status"] == "failed":
            break
        assert code in (0, 3)  # 3: the handler's os._exit took the process down
        time.sleep(0.6)  # let the dead worker's lease expire
    job = cluster.job(job_id)
    assert job["status"] == "failed" and job["attempts"] == 2
    assert [entry["error"] for entry in job["errors"]] == ["lease expired", "lease expired"]


@pytest.mark.stress
def test_three_workers_drain_thousands_of_jobs_each_run_once(cluster: Cluster) -> None:
    total = 3000
    log = cluster.tmp / "runs.log"
    # 10ms jobs: enough work that every process, however late it starts, takes part
    lines = "".join(json.dumps({"log": str(log), "sleep": 0.01}) + "\n" for _ in range(total))
    (cluster.tmp / "jobs.jsonl").write_text(lines)
    done = cluster.cli("enqueue", "record", "--from", "jobs.jsonl")
    assert done.returncode == 0, done.stderr
    procs = [cluster.worker("--until-empty", "--concurrency", "4") for _ in range(3)]
    assert [proc.wait(300) for proc in procs] == [0, 0, 0]
    runs = [line.split() for line in log.read_text().splitlines()]
    per_job = Counter(job_id for job_id, _, _ in runs)
    assert len(per_job) == total and set(per_job.values()) == {1}
    assert {attempt for _, attempt, _ in runs} == {"1"}
    workers = Counter(worker for _, _, worker in runs)
    assert len(workers) == 3, workers  # every process took part
    storage = SQLiteStorage(cluster.db, create=False)
    assert {job.status for job in storage.list_jobs(limit=total + 1)} == {"completed"}
    storage.close()


def test_sigterm_lets_a_short_job_finish(cluster: Cluster) -> None:
    marker = cluster.tmp / "started"
    # long enough that a loaded machine's slow `jobcore show` polls cannot outlast it
    job_id = cluster.enqueue("sleepy", {"seconds": 6.0, "started": str(marker)})
    worker = cluster.worker("--shutdown-timeout", "10s")
    cluster.wait_file(marker)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(20) == 0
    assert cluster.job(job_id)["status"] == "completed"


def test_sigterm_releases_a_long_job_without_spending_an_attempt(cluster: Cluster) -> None:
    marker = cluster.tmp / "started"
    job_id = cluster.enqueue("sleepy", {"seconds": 60, "started": str(marker)})
    worker = cluster.worker("--shutdown-timeout", "500ms")
    cluster.wait_file(marker)
    started = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(20) == 0
    assert time.monotonic() - started < 10
    job = cluster.job(job_id)
    assert job["status"] == "pending" and job["attempts"] == 0 and job["locked_by"] is None
    log = (cluster.tmp / "worker0.log").read_text()
    assert "released job" in log


def test_second_sigterm_stops_at_once(cluster: Cluster) -> None:
    marker = cluster.tmp / "started"
    job_id = cluster.enqueue("sleepy", {"seconds": 60, "started": str(marker)})
    worker = cluster.worker("--shutdown-timeout", "60s")
    cluster.wait_file(marker)
    worker.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    assert worker.poll() is None  # still waiting for the job
    worker.send_signal(signal.SIGINT)
    assert worker.wait(20) == 0
    assert cluster.job(job_id)["status"] == "pending"


def test_other_process_enqueue_wakes_an_idle_worker(cluster: Cluster) -> None:
    cluster.cli("enqueue", "noop", "--delay", "1h")  # creates the database
    worker = cluster.worker("--poll-interval", "60s")
    time.sleep(1.0)  # idle now; its next full poll is a minute away
    started = time.monotonic()
    job_id = cluster.enqueue("noop", {})
    # well within the minute to its next poll, with room for a loaded machine
    wait_for(lambda: cluster.job(job_id)["status"] == "completed", timeout=30)
    assert time.monotonic() - started < 30
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(20) == 0


def test_sigterm_kills_a_shell_jobs_process_group_before_releasing_it(cluster: Cluster) -> None:
    """Issue 8 defect 4: the job goes back to pending only once its grandchildren are gone."""
    started, late = cluster.tmp / "started", cluster.tmp / "late"
    # Everything in the group ignores SIGTERM: only the SIGKILL after the kill grace stops it.
    command = f"trap '' TERM; (sleep 4; touch {late}) & touch {started}; wait"
    job_id = cluster.enqueue("shell", {"command": command})
    worker = cluster.worker("--shutdown-timeout", "300ms")
    cluster.wait_file(started)
    signalled = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(20) == 0
    job = cluster.job(job_id)
    assert job["status"] == "pending" and job["attempts"] == 0 and job["locked_by"] is None
    time.sleep(max(0.0, 5.0 - (time.monotonic() - signalled)))  # past when it would write
    assert not late.exists(), "a grandchild of the released job outlived its worker"


def test_max_jobs_exits_when_its_job_lost_the_lease(cluster: Cluster) -> None:
    """Issue 8 defect 12: a run lost with its lease counts towards --max-jobs."""
    marker = cluster.tmp / "started"
    job_id = cluster.enqueue("sleepy", {"seconds": 60, "cooperative": True, "started": str(marker)})
    worker = cluster.worker("--max-jobs", "1", "--lease", "1s")
    cluster.wait_file(marker)
    for _ in range(5):
        worker.send_signal(signal.SIGSTOP)  # paused past its lease, as under memory pressure
        try:
            time.sleep(1.5)
            # Paused inside a heartbeat's transaction, it holds the write lock: try again.
            swept = cluster.cli("sweep", env={"JOBCORE_BUSY_TIMEOUT": "1s", "JOBCORE_LEASE": "1s"})
        finally:
            worker.send_signal(signal.SIGCONT)
        if swept.returncode == 0:
            break
        time.sleep(0.1)
    assert swept.returncode == 0, swept.stderr
    assert cluster.job(job_id)["status"] == "pending"
    assert worker.wait(20) == 0
    log = (cluster.tmp / "worker0.log").read_text()
    assert "lost the lease of job" in log


def prefetch_behind_a_blocker(cluster: Cluster, *record_options: str) -> tuple[str, list[str]]:
    """Short jobs to make the worker prefetch, a blocker it starts, record jobs left waiting."""
    for _ in range(3):
        cluster.enqueue("noop", {}, "--priority", "10")
    blocker = cluster.enqueue(
        "sleepy",
        {"seconds": 60, "cooperative": True, "started": str(cluster.tmp / "started")},
        "--priority",
        "5",
    )
    log = str(cluster.tmp / "runs.log")
    waiting = [cluster.enqueue("record", {"log": log}, *record_options) for _ in range(4)]
    return blocker, waiting


def test_jobs_a_killed_worker_never_started_do_not_fail_for_its_death(cluster: Cluster) -> None:
    """Issue 8 defect 8: prefetched, never started, max_attempts 1: they still run."""
    _blocker, waiting = prefetch_behind_a_blocker(cluster, "--max-attempts", "1")
    first = cluster.worker("--concurrency", "1", "--lease", "1s", JOBCORE_PREFETCH_WAIT="60s")
    cluster.wait_file(cluster.tmp / "started")
    assert {cluster.job(job_id)["status"] for job_id in waiting} == {"claimed"}
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    time.sleep(1.2)  # its leases run out
    second = cluster.worker("--type", "record", "--until-empty", "--lease", "1s")
    assert second.wait(30) == 0
    for job_id in waiting:
        job = cluster.job(job_id)
        assert job["status"] == "completed" and job["attempts"] == 1 and job["errors"] == []


def test_a_prefetched_job_that_kills_its_worker_still_ends_failed(cluster: Cluster) -> None:
    """Issue 8 defect 8: giving back never-started jobs cannot make a crasher run for ever."""
    job_id = cluster.enqueue("crash", {}, "--max-attempts", "2", "--priority", "-1")
    runs = 0
    while cluster.job(job_id)["status"] != "failed":
        runs += 1
        assert runs <= 6, cluster.job(job_id)
        for _ in range(3):  # short jobs first, so the crasher is claimed as a prefetched job
            cluster.enqueue("noop", {})
        proc = cluster.worker("--lease", "500ms", "--until-empty", "--concurrency", "1")
        assert proc.wait(30) in (0, 3)  # 3: the handler's os._exit took the process down
        time.sleep(0.6)  # let the dead worker's lease expire
    job = cluster.job(job_id)
    assert job["attempts"] == 2
    assert [entry["error"] for entry in job["errors"]] == ["lease expired", "lease expired"]
