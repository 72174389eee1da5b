"""Start slots across real worker processes killed with SIGKILL on an SQLite file
(DESIGN §6, crash accounting; `jobcore.start_slots`): what a dead worker noted is
neither overwritten by its restart, nor deleted by a sweep while claims it names
remain."""

from __future__ import annotations

import time
from pathlib import Path

import apsw
from testenv import subprocess_env
from worker_crashes import LEASE, run_cli, start_worker

from jobcore import Queue, start_slots
from jobcore.models import Job

KILL = 'kill -9 "$WORKER_PID"'


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
