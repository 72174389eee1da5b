"""Attempts, timeline and the overview snapshot from real jobs."""

from __future__ import annotations

from pathlib import Path

from jobcore_http.dashboard.job_view import attempts, timeline
from jobcore_http.dashboard.overview import ChangeCache, by, count, history
from jobcore_http.dashboard.reader import Reader

from jobcore import Queue
from jobcore.models import Failed, Lease, Retrying
from jobcore.timeutil import now_ms


def test_a_failed_job_lists_each_attempt_with_worker_and_error(tmp_path: Path) -> None:
    with Queue(str(tmp_path / "jobs.db")) as queue:
        job_id = queue.enqueue("noop", {"fail": True}).job.id
        for number, worker in enumerate(["w-a", "w-b", "w-c"], start=1):
            claimed = queue.storage.claim(worker=worker, limit=1, now=now_ms(), lease_ms=60_000)
            lease = Lease(job_id=job_id, worker=worker, attempt=number)
            outcome = (
                Failed(lease=lease, error=f"boom {number}")
                if number == 3
                else Retrying(lease=lease, error=f"boom {number}", run_at=0)
            )
            assert claimed and queue.storage.record([outcome], now=now_ms())[0].job is not None
        job = queue.get(job_id)
    tries = attempts(job)
    assert [(t.attempt, t.worker, t.outcome, t.error) for t in tries] == [
        (1, "w-a", "retrying", "boom 1"),
        (2, "w-b", "retrying", "boom 2"),
        (3, "w-c", "failed", "boom 3"),
    ]
    kinds = [moment.kind for moment in timeline(job, tries)]
    assert kinds[0] == "created" and kinds.count("failed") == 1


def test_counts_are_recounted_only_after_the_store_changed(tmp_path: Path) -> None:
    with Queue(str(tmp_path / "jobs.db")) as queue:
        queue.enqueue_many("noop", [{} for _ in range(4)], queue="mail")
        reader = Reader(queue)
        calls = []

        def compute() -> object:
            calls.append(1)
            return count(reader)

        cache = ChangeCache(reader.path, compute, "test")
        first = cache.get().value
        assert first.totals == {"pending": 4}
        assert by(first.unfinished, 2) == {"mail": {"pending": 4}}
        cache.get()
        assert len(calls) == 1
        queue.enqueue("noop", {})  # another connection commits
        assert cache.get().value.totals == {"pending": 5}
        assert len(calls) == 2
        cache.close()


def test_history_counts_finished_jobs_per_minute_and_worker(tmp_path: Path) -> None:
    with Queue(str(tmp_path / "jobs.db")) as queue:
        queue.enqueue_many("noop", [{} for _ in range(3)], queue="mail")
        now = now_ms()
        claimed = queue.storage.claim(worker="w-1", limit=3, now=now, lease_ms=60_000)
        outcomes = [
            Failed(lease=Lease(job_id=job.id, worker="w-1", attempt=1), error="x")
            for job in claimed[:1]
        ]
        queue.storage.record(outcomes, now=now)
        past = history(Reader(queue), now_ms())
    assert past.finished == {("failed", "noop", "mail"): 1}
    assert sum(slot[1] for slot in past.minutes.values()) == 1
    assert set(past.workers_seen) == {"w-1"}
