"""Start slots across real worker processes killed with SIGKILL on an SQLite file
(DESIGN §6, crash accounting; `jobcore.start_slots`): what a dead worker noted is
neither overwritten by its restart, nor deleted by a sweep while claims it names
remain, nor lost when an executor runs ahead of the loop's commits."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import apsw
from testenv import subprocess_env, wait_for
from worker_crashes import LEASE, run_cli, start_worker

from jobcore import Queue, start_slots
from jobcore.models import Job

KILL = 'kill -9 "$WORKER_PID"'
RAN = 10  # jobs that finish while the worker's commits wait


def charged_once(job: Job | None) -> bool:
    """Its only attempt ran and its worker died before recording it: reclaimed, charged."""
    return (
        job is not None
        and job.attempts == 1
        and [e["error"] for e in job.errors] == ["lease expired"]
        and [entry["outcome"] for entry in job.history] == ["reclaimed"]
    )


def test_a_worker_restarted_with_the_same_id_keeps_what_its_predecessor_noted(
    tmp_path: Path,
) -> None:
    """A supervisor restarting `jobcore run --worker-id w1` after each crash: the new
    process must not wipe the dead one's note before its own first sweep reads it, or the
    job that kills the worker would be given back uncharged, and run for ever."""
    db = str(tmp_path / "jobs.db")
    env = subprocess_env(JOBCORE_DB=db)
    runs = tmp_path / "runs.log"
    log = tmp_path / "workers.log"
    with Queue(db) as queue:
        job_id = queue.enqueue(
            "shell", {"command": f'echo run >> "{runs}"; {KILL}'}, max_attempts=3
        ).job.id
        for _round in range(6):
            proc = start_worker(env, tmp_path, log, "--worker-id", "w1")
            assert proc.wait(60) in (0, -9), log.read_text()[-3000:]
            job = queue.get(job_id)
            if job.status == "failed":
                break
            time.sleep(LEASE + 0.2)  # no `jobcore sweep`: the restarted worker's sweep counts
        assert job.status == "failed", job.history
        assert runs.read_text().split() == ["run"] * 3
        assert job.attempts == 3 and [e["error"] for e in job.errors] == ["lease expired"] * 3
        assert [entry["outcome"] for entry in job.history] == ["reclaimed"] * 2 + ["failed"]
    assert not start_slots.files_of(db, "w1"), "the last worker took the dead files away"


def test_a_sweep_keeps_a_dead_workers_note_of_claims_whose_leases_have_not_expired(
    tmp_path: Path,
) -> None:
    """The worker dies running two jobs whose leases end apart. The sweep that handles
    the first must not delete the note of the second (its killer): that one is charged
    too once its lease ends."""
    db = str(tmp_path / "jobs.db")
    env = subprocess_env(JOBCORE_DB=db)
    started = tmp_path / "started"
    log = tmp_path / "worker.log"
    with Queue(db) as queue:
        slow = queue.enqueue("shell", {"command": f'touch "{started}"; sleep 60'}).job.id
        killer = queue.enqueue(
            "shell", {"command": f'while [ ! -e "{started}" ]; do sleep 0.01; done; {KILL}'}
        ).job.id
        proc = start_worker(env, tmp_path, log, "--concurrency", "2")
        assert proc.wait(60) == -9, log.read_text()[-3000:]
        assert {queue.get(job_id).status for job_id in (slow, killer)} == {"claimed"}
        conn = apsw.Connection(db)
        try:  # the slow job's lease ran out first (its heartbeat stopped earlier)
            conn.execute(
                "UPDATE jobs SET lease_expires_at = lease_expires_at - 3600000 WHERE id = ?",
                (slow,),
            )
            conn.execute(  # and the killer's some time after the sweep
                "UPDATE jobs SET lease_expires_at = lease_expires_at + 3600000 WHERE id = ?",
                (killer,),
            )
        finally:
            conn.close()
        sweep_env = {**env, "JOBCORE_LEASE": f"{LEASE}s"}
        run_cli(sweep_env, tmp_path, "sweep")
        assert charged_once(queue.get(slow))
        assert queue.get(killer).status == "claimed"
        conn = apsw.Connection(db)
        try:  # now the killer's lease runs out too
            conn.execute(
                "UPDATE jobs SET lease_expires_at = lease_expires_at - 7200000 WHERE id = ?",
                (killer,),
            )
        finally:
            conn.close()
        run_cli(sweep_env, tmp_path, "sweep")
        assert charged_once(queue.get(killer)), queue.get(killer).history
    assert not start_slots.folder(db).exists() or not list(start_slots.folder(db).iterdir())


@contextmanager
def commits_held_on_request(db: str, tmp: Path) -> Iterator[None]:
    """Once a handler touches `want_lock`, this process takes the database's write lock
    (the worker's commits wait) and touches `locked`; it lets go when the block ends."""
    want, locked, done = tmp / "want_lock", tmp / "locked", threading.Event()

    def hold() -> None:
        conn = apsw.Connection(db)
        conn.set_busy_timeout(30_000)
        try:
            while not want.exists():
                if done.wait(0.005):
                    return
            conn.execute("BEGIN IMMEDIATE")
            locked.touch()
            done.wait()
            conn.execute("ROLLBACK")
        finally:
            conn.close()

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(30)


def enqueue_run_ahead(queue: Queue, tmp: Path, last: str) -> tuple[list[str], list[str], str]:
    """Short jobs (so the worker prefetches), a job asking for the write lock, short jobs
    that finish while their outcomes cannot commit, and `last`, all claimed in advance."""
    runs = tmp / "runs.log"
    warm = [r.job.id for r in queue.enqueue_many("noop", [{}] * 40, priority=30)]
    asks = f'touch "{tmp}/want_lock"; while [ ! -e "{tmp}/locked" ]; do sleep 0.01; done'
    queue.enqueue("shell", {"command": asks}, priority=20)
    note = {"command": f'echo run >> "{runs}"'}
    ran = [r.job.id for r in queue.enqueue_many("shell", [note] * RAN, priority=10)]
    final = queue.enqueue("shell", {"command": last}, priority=0).job.id
    return warm, ran, final


def test_jobs_whose_outcomes_never_committed_are_charged_when_the_worker_dies(
    tmp_path: Path,
) -> None:
    """An executor runs ahead of the loop's commits: jobs whose handlers returned wait
    for their outcomes to commit while it begins the next ones. The worker dies then:
    those handlers ran, so each is charged an attempt (the next run is a re-run), as the
    job that killed it is; none is given back as never started."""
    db = str(tmp_path / "jobs.db")
    env = subprocess_env(JOBCORE_DB=db)
    log = tmp_path / "worker.log"
    with Queue(db) as queue, commits_held_on_request(db, tmp_path):
        _, ran, killer = enqueue_run_ahead(queue, tmp_path, KILL)
        proc = start_worker(env, tmp_path, log)
        assert proc.wait(60) == -9, log.read_text()[-3000:]
    with Queue(db) as queue:
        assert queue.get(killer).status == "claimed", "the killer was not prefetched"
        assert (tmp_path / "runs.log").read_text().split() == ["run"] * RAN  # all of them ran
        time.sleep(LEASE + 0.2)
        run_cli({**env, "JOBCORE_LEASE": f"{LEASE}s"}, tmp_path, "sweep")
        assert charged_once(queue.get(killer))
        for job_id in ran:
            job = queue.get(job_id)
            assert charged_once(job), job.history


def test_a_worker_stopping_with_outcomes_unrecorded_charges_nobody(
    tmp_path: Path,
) -> None:
    """SIGTERM while the database takes no writes: the worker gives up ("stopping with N
    outcome(s) unrecorded") and exits. That is a stop, not a crash (DESIGN §6 charges a
    handler that takes its worker down): the sweep gives every one of them back without
    an attempt spent, those whose handlers ran and the one the shutdown stopped, and they
    run again (at least once). Charging them would fail a job that succeeded."""
    db = str(tmp_path / "jobs.db")
    env = subprocess_env(JOBCORE_DB=db, JOBCORE_BUSY_TIMEOUT="0.2s", JOBCORE_STOP_GRACE="5s")
    log = tmp_path / "worker.log"
    with Queue(db) as queue, commits_held_on_request(db, tmp_path):
        stop = 'kill -TERM "$WORKER_PID"; sleep 60'  # stopped at the shutdown deadline
        _, ran, last = enqueue_run_ahead(queue, tmp_path, stop)
        proc = start_worker(env, tmp_path, log, "--shutdown-timeout", "0.3s")
        wait_for(lambda: "outcome(s) unrecorded" in log.read_text(), timeout=60)
        assert proc.wait(60) == 1, log.read_text()[-3000:]
    with Queue(db) as queue:
        time.sleep(LEASE + 0.2)
        run_cli({**env, "JOBCORE_LEASE": f"{LEASE}s"}, tmp_path, "sweep")
        for job_id in [*ran, last]:
            job = queue.get(job_id)
            assert job.status == "pending" and (job.attempts, job.errors) == (0, []), job
            assert [entry["outcome"] for entry in job.history] == ["released"], job.history
    assert "stopped with their outcomes unrecorded" in log.read_text()
