"""Cancel of a job that moves from claimed to waiting (its worker released or retried it)
while the cancel runs: the cancel lands, never "it is already pending" (DESIGN §8)."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

from jobcore import Queue
from jobcore.models import JobStatus


@pytest.mark.parametrize("moved_to", ["pending", "scheduled"])
def test_cancel_of_a_job_released_meanwhile_cancels_it(
    queue: Queue, pg_database: str, moved_to: str
) -> None:
    storage: Any = queue.storage
    jobs = f"{storage.schema}.jobs"
    queue.enqueue("noop", {})
    _, [job] = storage.commit_batch([], worker="w", claim_limit=1, lease_ms=60_000)
    # the worker's release, written but not committed: it holds the row lock
    worker = psycopg.connect(pg_database)
    try:
        worker.execute(
            f"UPDATE {jobs} SET status = %s, locked_by = NULL, lease_expires_at = NULL "
            "WHERE id = %s",
            (moved_to, job.id),
        )
        answer: dict[str, Any] = {}

        def cancel() -> None:
            try:
                answer["jobs"] = queue.cancel([job.id])
            except Exception as exc:
                answer["error"] = exc

        thread = threading.Thread(target=cancel)
        thread.start()
        with psycopg.connect(pg_database, autocommit=True) as watch:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:  # until the cancel waits for the row lock
                row = watch.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND query LIKE %s",
                    (f"UPDATE {jobs}%",),
                ).fetchone()
                if row and row[0]:
                    break
                time.sleep(0.01)
            else:
                pytest.fail("the cancel never waited for the worker's row lock")
        worker.commit()  # the job is waiting now, no longer claimed
        thread.join(10)
    finally:
        worker.close()
    assert "error" not in answer, answer.get("error")
    [cancelled] = answer["jobs"]
    assert cancelled.status is JobStatus.CANCELLED
    assert queue.get(job.id).status is JobStatus.CANCELLED
