"""SIGTERM twice quickly (DESIGN §6: a second signal means now) reaches a `jobcore run`
whose loop waits for another process's write lock, and one that is already winding down."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import apsw
import pytest
from testenv import subprocess_env, wait_for

from jobcore import Queue

JOBCORE = [sys.executable, "-m", "jobcore"]


def test_two_quick_sigterms_during_a_held_write_lock_still_mean_now(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both signals arrive while the loop's commit waits for the lock: they are two, not one.

    Before, SQLite's busy wait held the main thread in C, so the two signals were handled
    once, after the lock was let go: a graceful stop that waited for the long handler.
    """
    monkeypatch.setenv("JOBCORE_PLUGINS", "jobcore_test_plugin")
    db = tmp_path / "jobs.db"
    env = subprocess_env(JOBCORE_DB=str(db), JOBCORE_STOP_GRACE="60s")
    started = tmp_path / "started"
    with Queue(str(db)) as queue:
        long_id = queue.enqueue("sleepy", {"seconds": 120, "started": str(started)}).job.id
        for _ in range(20):  # short jobs keep the loop committing
            queue.enqueue("sleepy", {"seconds": 0.1})
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            [*JOBCORE, "run", "--concurrency", "2", "--shutdown-timeout", "60s"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    holder = apsw.Connection(str(db))
    try:
        wait_for(started.exists, timeout=60)
        holder.set_busy_timeout(10_000)
        holder.execute("BEGIN IMMEDIATE")
        time.sleep(0.8)  # a short job reported: the loop's commit now waits for the lock
        worker.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        worker.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        holder.execute("COMMIT")
        asked = time.monotonic()
        try:
            code = worker.wait(20)
        except subprocess.TimeoutExpired:
            raise AssertionError("the second SIGTERM was lost:\n" + log.read_text()) from None
        assert code == 0, log.read_text()
        assert time.monotonic() - asked < 15, log.read_text()
    finally:
        if holder.in_transaction:
            holder.execute("ROLLBACK")
        holder.close()
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    with Queue(str(db)) as queue:
        job = queue.get(long_id)
        assert job.status == "pending" and job.attempts == 0 and job.locked_by is None, job
    check = apsw.Connection(str(db))
    claimed = list(check.execute("SELECT id FROM jobs WHERE status = 'claimed'"))
    check.close()
    assert claimed == [], claimed
    text = log.read_text()
    assert "stopping now" in text, text


SLOW_STOP_PLUGIN = """
import time
from pathlib import Path
from jobcore import hookimpl

@hookimpl
def jobcore_worker_stopped(worker):
    Path(__file__).with_name("stopping").write_text(worker)
    time.sleep(3)
"""


def test_a_second_sigterm_while_the_worker_winds_down_is_not_a_kill(tmp_path: Path) -> None:
    """The loop already ended (handlers restored); a second, quick SIGTERM is part of the
    same stop: exit 0 with the summary line, not death by the signal (status -15)."""
    (tmp_path / "slow_stop.py").write_text(SLOW_STOP_PLUGIN)
    env = subprocess_env(JOBCORE_DB=str(tmp_path / "jobs.db"))
    env["JOBCORE_PLUGINS"] = "jobcore_test_plugin,slow_stop"
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            [*JOBCORE, "run"], env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        wait_for(lambda: " started: " in log.read_text(), timeout=60)
        worker.send_signal(signal.SIGTERM)
        wait_for((tmp_path / "stopping").exists, timeout=30)  # the stop hooks run now
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0, log.read_text()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert " finished: " in log.read_text()
