"""Issue 22.18: a worker notices that its database file was replaced or deleted.

It stops with an error (exit 1) within a few poll intervals instead of working on a
file nobody else reads while jobs enqueued at its `--db` path stay pending for good.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from testenv import subprocess_env, wait_for

from jobcore import Queue

JOBCORE = [sys.executable, "-m", "jobcore"]


@pytest.mark.parametrize("how", ["replaced", "deleted"])
def test_a_worker_stops_when_its_database_file_is_replaced_or_deleted(
    tmp_path: Path, how: str
) -> None:
    db = tmp_path / "jobs.db"
    with Queue(str(db)) as queue:
        first = queue.enqueue("noop", {}).job
    backup = tmp_path / "backup.db"
    with Queue(str(backup)) as other:
        restored = other.enqueue("noop", {}).job  # in the file that will take db's place
    log = tmp_path / "worker.log"
    env = subprocess_env(JOBCORE_DB=str(db), JOBCORE_POLL_INTERVAL="200ms")
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            [*JOBCORE, "run"], env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        with Queue(str(db)) as queue:
            wait_for(lambda: queue.get(first.id).status.value == "completed", timeout=60)
        if how == "replaced":
            os.replace(backup, db)  # a restore
        else:
            for path in tmp_path.glob("jobs.db*"):  # a reset: rm -r jobs.db*
                shutil.rmtree(path) if path.is_dir() else path.unlink()
        assert worker.wait(30) == 1, log.read_text()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    text = log.read_text()
    assert f"database {db} was {how}" in text and "stopping this worker" in text, text
    if how == "replaced":  # the new file's job runs once a worker starts on it
        done = subprocess.run(
            [*JOBCORE, "run", "--until-empty"], env=env, cwd=tmp_path, capture_output=True
        )
        assert done.returncode == 0
        with Queue(str(db)) as queue:
            assert queue.get(restored.id).status.value == "completed"
