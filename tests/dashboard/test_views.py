"""Attempts, timeline and the overview's counts from jobs a real worker ran."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from jobcore_http.dashboard.job_view import attempts, timeline
from jobcore_http.dashboard.overview import ChangeCache, by, count, history
from jobcore_http.dashboard.reader import Reader
from jobcore_http.store import hub_store_for

from jobcore import Queue
from jobcore.testing.helpers import drain
from jobcore.timeutil import now_ms


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBCORE_BACKOFF_BASE", "0.01")
    monkeypatch.setenv("JOBCORE_BACKOFF_CAP", "0.02")


def test_a_failed_job_lists_each_attempt_with_worker_and_error(tmp_path: Path) -> None:
    with Queue(str(tmp_path / "jobs.db")) as queue:
        job_id = queue.enqueue("noop", {"fail": True}, max_attempts=3).job.id
        for round_number in range(50):
            drain(queue, worker_id=f"w-{round_number}")
            if queue.get(job_id).status == "failed":
                break
            time.sleep(0.02)
        job = queue.get(job_id)
    tries = attempts(job)
    assert [t.attempt for t in tries] == [1, 2, 3]
    assert [t.outcome for t in tries] == ["retrying", "retrying", "failed"]
    assert all(t.worker and t.worker.startswith("w-") for t in tries)
    assert all("noop failed as asked" in (t.error or "") for t in tries)
    kinds = [moment.kind for moment in timeline(job, tries)]
    assert kinds[0] == "created" and kinds.count("failed") == 1


def test_counts_are_recounted_only_after_the_store_changed(tmp_path: Path) -> None:
    with Queue(str(tmp_path / "jobs.db")) as queue:
        queue.enqueue_many("noop", [{} for _ in range(4)], queue="mail")
        reader = Reader(queue, hub_store_for(queue.storage))
        calls = []

        def compute() -> object:
            calls.append(1)
            return count(reader)

        cache = ChangeCache(reader.sql.change_token, compute, "test")
        first = cache.get().value
        assert first.totals == {"pending": 4}
        assert by(first.unfinished, 2) == {"mail": {"pending": 4}}
        cache.get()
        assert len(calls) == 1
        queue.enqueue("noop", {})  # another connection commits
        assert cache.get().value.totals == {"pending": 5}
        assert len(calls) == 2
        reader.close()


def test_history_counts_finished_jobs_per_minute_and_worker(tmp_path: Path) -> None:
    with Queue(str(tmp_path / "jobs.db")) as queue:
        queue.enqueue("noop", {"fail": True}, queue="mail", max_attempts=1)
        queue.enqueue("noop", {}, queue="mail")
        drain(queue, worker_id="w-1")
        past = history(Reader(queue, hub_store_for(queue.storage)), now_ms())
    assert past.finished == {("failed", "noop", "mail"): 1, ("completed", "noop", "mail"): 1}
    assert sum(slot[0] for slot in past.minutes.values()) == 1
    assert sum(slot[1] for slot in past.minutes.values()) == 1
    assert set(past.workers_seen) == {"w-1"}
