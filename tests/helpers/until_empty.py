"""`jobcore run --until-empty` on a chain of parents enqueuing children (both stores)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jobcore_test_plugin as tp
from testenv import subprocess_env

from jobcore.testing import make_queue

JOBCORE = [sys.executable, "-m", "jobcore"]


def run_until_empty_leaves_no_children(tmp: Path, db: str, *, rounds: int = 4) -> None:
    """Each round: one parent whose handler enqueues children (committed with its
    completion); one `run --until-empty` must run them all before it exits 0."""
    env = subprocess_env(JOBCORE_DB=db)
    with make_queue(db, tp, entrypoints=True) as queue:
        for _ in range(rounds):
            # first a job that outlasts the worker's first sweep (until then it would not
            # call the queue empty anyway), then the parent
            queue.enqueue("sleepy", {"seconds": 0.5}, priority=10)
            parent = queue.enqueue("parent", {"children": 3}).job
            done = subprocess.run(
                [*JOBCORE, "run", "--until-empty", "--concurrency", "1"],
                env=env,
                cwd=tmp,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, done.stderr
            assert queue.get(parent.id).status == "completed", done.stderr
            counts = queue.storage.count_by_status()
            assert set(counts) == {"completed"}, (counts, done.stderr[-2000:])
