"""The worker against a real SQLite file: outcomes, retries, timeouts, cancel, shutdown."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw
import jobcore_test_plugin as tp
import pytest
from testenv import wait_for

from jobcore import JobStatus, NewJob, Queue, Worker, hookimpl
from jobcore.ids import new_id
from jobcore.testing import HookRecorder, drain
from jobcore.timeutil import now_ms

MakeQueue = Callable[..., Queue]


@pytest.fixture
def queue(jobcore_make_queue: MakeQueue, jobcore_recorder: HookRecorder) -> Queue:
    return jobcore_make_queue(tp, jobcore_recorder)


def start_worker(queue: Queue, **options: Any) -> tuple[Worker, threading.Thread]:
    worker = Worker(queue, **options)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return worker, thread


def test_drain_completes_jobs_and_fires_hooks_in_order(
    queue: Queue, jobcore_recorder: HookRecorder
) -> None:
    job = queue.enqueue("noop", {"sleep": 0.01}).job
    worker = drain(queue)
    done = queue.get(job.id)
    assert done.status is JobStatus.COMPLETED and done.attempts == 1
    assert done.result == {"slept": 0.01}
    assert jobcore_recorder.events(job.id) == ["job_enqueued", "job_claimed", "job_completed"]
    assert jobcore_recorder.events()[-1] == "worker_stopped"
    assert worker.stats["completed"] == 1


def test_failing_handler_retries_then_fails_with_history(
    queue: Queue, jobcore_recorder: HookRecorder
) -> None:
    job = queue.enqueue("fail", {"message": "disk on fire"}, max_attempts=3).job
    drain(queue)
    failed = queue.get(job.id)
    assert failed.status is JobStatus.FAILED and failed.attempts == 3
    assert [entry["attempt"] for entry in failed.errors] == [1, 2, 3]
    assert all(entry["error"] == "ValueError: disk on fire" for entry in failed.errors)
    assert failed.last_error == "ValueError: disk on fire"
    assert jobcore_recorder.events(job.id).count("job_retrying") == 2
    assert jobcore_recorder.events(job.id)[-1] == "job_failed"


def test_permanent_error_fails_at_once(queue: Queue) -> None:
    job = queue.enqueue("fail", {"how": "permanent"}).job
    drain(queue)
    failed = queue.get(job.id)
    assert failed.status is JobStatus.FAILED and failed.attempts == 1
    assert failed.last_error == "PermanentError: it broke"


def test_retry_after_reschedules_precisely(queue: Queue) -> None:
    job = queue.enqueue("fail", {"how": "retry_after", "seconds": 30}).job
    before = now_ms()
    drain(queue)  # the retry is not due, so the worker leaves it scheduled
    waiting = queue.get(job.id)
    assert waiting.status is JobStatus.SCHEDULED and waiting.attempts == 1
    assert before + 30_000 <= waiting.run_at <= now_ms() + 30_000


def test_backoff_uses_the_configured_base(jobcore_make_queue: MakeQueue) -> None:
    queue = jobcore_make_queue(tp, backoff_base=10.0, backoff_cap=15.0)
    job = queue.enqueue("fail", {}).job
    drain(queue)
    first = queue.get(job.id)
    assert first.status is JobStatus.SCHEDULED
    assert 9_900 <= first.run_at - first.updated_at <= 10_000
    policy = queue.policy_for("fail")
    assert (policy.backoff(1), policy.backoff(2), policy.backoff(3)) == (10.0, 15.0, 15.0)


def test_timeout_fails_the_attempt_and_retries(jobcore_make_queue: MakeQueue) -> None:
    queue = jobcore_make_queue(tp, stop_grace=0.3)
    job = queue.enqueue("sleepy", {"seconds": 3}, timeout=0.2, max_attempts=2).job
    started = time.monotonic()
    drain(queue)
    elapsed = time.monotonic() - started
    failed = queue.get(job.id)
    assert failed.status is JobStatus.FAILED and failed.attempts == 2
    assert [entry["error"] for entry in failed.errors] == ["JobTimeout: timed out after 0.2s"] * 2
    assert elapsed < 2.5  # past the stop grace, the worker did not wait for the hung handlers


def test_timeout_asks_a_cooperative_handler_to_stop(queue: Queue) -> None:
    job = queue.enqueue(
        "sleepy", {"seconds": 30, "cooperative": True}, timeout=0.2, max_attempts=1
    ).job
    drain(queue)
    assert queue.get(job.id).last_error == "JobTimeout: timed out after 0.2s"


def test_children_commit_with_the_parent(queue: Queue) -> None:
    ok = queue.enqueue("parent", {"children": 3}).job
    bad = queue.enqueue("parent", {"children": 2, "fail": True}).job
    drain(queue)
    children = [job for job in queue.list_jobs(limit=100) if job.parent_id is not None]
    assert {job.parent_id for job in children} == {ok.id}
    assert len(children) == 3 and all(job.status is JobStatus.COMPLETED for job in children)
    assert queue.get(bad.id).status is JobStatus.FAILED


def test_child_enqueue_is_validated_in_the_handler(queue: Queue) -> None:
    class BadChild:
        @hookimpl
        def jobcore_register_job_types(self, register: Any) -> None:
            from jobcore import JobType
            from jobcore.builtin.noop import NoopPayload

            def handler(payload: Any, ctx: Any) -> None:
                ctx.enqueue("noop", {"nope": 1})

            register(JobType(name="bad_child", payload_model=NoopPayload, handler=handler))

    queue.pm.register(BadChild(), name="bad-child")
    queue.registry = queue._collect_job_types()
    job = queue.enqueue("bad_child", {}, max_attempts=1).job
    drain(queue)
    failed = queue.get(job.id)
    assert failed.status is JobStatus.FAILED
    assert "nope: unknown field" in (failed.last_error or "")


def test_cancel_a_running_job(queue: Queue, tmp_path: Path, jobcore_recorder: HookRecorder) -> None:
    marker = tmp_path / "started"
    job = queue.enqueue("sleepy", {"seconds": 30, "cooperative": True, "started": str(marker)}).job
    _worker, thread = start_worker(queue, until_empty=True)
    wait_for(marker.exists)
    [requested] = queue.cancel([job.id])
    assert requested.cancel_requested and requested.status is JobStatus.CLAIMED
    thread.join(10)
    assert not thread.is_alive()
    cancelled = queue.get(job.id)
    assert cancelled.status is JobStatus.CANCELLED
    assert "job_cancelled" in jobcore_recorder.events(job.id)


def test_cancel_waiting_jobs_and_finished_is_an_error(queue: Queue) -> None:
    from jobcore import IllegalTransition

    waiting = queue.enqueue("noop", {}, delay=60).job
    [cancelled] = queue.cancel([waiting.id])
    assert cancelled.status is JobStatus.CANCELLED
    with pytest.raises(IllegalTransition, match="already cancelled"):
        queue.cancel([waiting.id])


def test_stored_payload_that_no_longer_validates_fails_permanently(queue: Queue) -> None:
    bad = NewJob(
        id=new_id(),
        type="noop",
        queue="default",
        payload={"sleep": "soon"},
        priority=0,
        max_attempts=3,
        run_at=0,
        timeout_ms=None,
        idempotency_key=None,
    )
    queue.insert([bad])
    drain(queue)
    failed = queue.get(bad.id)
    assert failed.status is JobStatus.FAILED and failed.attempts == 1
    assert "sleep" in (failed.last_error or "")


def test_a_failing_notification_hook_never_fails_the_job(
    jobcore_make_queue: MakeQueue, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken:
        @hookimpl
        def jobcore_job_completed(self, job: Any) -> None:
            raise RuntimeError("observer exploded")

    recorder = HookRecorder()
    queue = jobcore_make_queue(Broken(), recorder)
    job = queue.enqueue("noop", {}).job
    with caplog.at_level(logging.ERROR, logger="jobcore.plugins"):
        drain(queue)
    assert queue.get(job.id).status is JobStatus.COMPLETED
    assert "job_completed" in recorder.events(job.id)  # the other observers still ran
    assert any(
        "Broken" in rec.getMessage() and "jobcore_job_completed" in rec.getMessage()
        for rec in caplog.records
    )


def test_heartbeats_keep_a_long_job_claimed(queue: Queue, tmp_path: Path) -> None:
    marker = tmp_path / "started"
    job = queue.enqueue("sleepy", {"seconds": 1.5, "started": str(marker)}).job
    _worker, thread = start_worker(queue, lease=0.4, until_empty=True)
    wait_for(marker.exists)
    deadline = time.monotonic() + 1.2
    while time.monotonic() < deadline:
        assert queue.sweep() == []  # the lease is extended every lease/4, never expires
        time.sleep(0.05)
    thread.join(10)
    done = queue.get(job.id)
    assert done.status is JobStatus.COMPLETED and done.attempts == 1 and done.errors == []


def test_graceful_stop_lets_a_running_job_finish(queue: Queue, tmp_path: Path) -> None:
    marker = tmp_path / "started"
    job = queue.enqueue("sleepy", {"seconds": 0.5, "started": str(marker)}).job
    worker, thread = start_worker(queue, shutdown_timeout=5)
    wait_for(marker.exists)
    worker.stop()
    thread.join(10)
    assert not thread.is_alive() and worker.exit_code == 0
    assert queue.get(job.id).status is JobStatus.COMPLETED


def test_stop_past_the_deadline_releases_the_job_without_spending_an_attempt(
    queue: Queue, tmp_path: Path
) -> None:
    marker = tmp_path / "started"
    job = queue.enqueue("sleepy", {"seconds": 30, "started": str(marker)}).job
    other = queue.enqueue("noop", {}, delay=3600).job
    worker, thread = start_worker(queue, shutdown_timeout=0.3)
    wait_for(marker.exists)
    worker.stop()
    thread.join(10)
    assert not thread.is_alive()
    released = queue.get(job.id)
    assert released.status is JobStatus.PENDING and released.attempts == 0
    assert released.locked_by is None and released.errors == []
    assert queue.get(other.id).status is JobStatus.SCHEDULED
    assert queue.list_jobs(statuses=["claimed"]) == []


def test_database_errors_back_off_and_recover(
    jobcore_make_queue: MakeQueue, jobcore_db: str, caplog: pytest.LogCaptureFixture
) -> None:
    queue = jobcore_make_queue(tp, busy_timeout=0.05)
    queue.storage.migrate()
    blocker = apsw.Connection(jobcore_db)
    blocker.execute("BEGIN IMMEDIATE")  # another connection holds the write lock
    with caplog.at_level(logging.ERROR, logger="jobcore.worker"):
        _worker, thread = start_worker(queue, until_empty=True)
        wait_for(lambda: any("database error" in r.getMessage() for r in caplog.records))
        blocker.execute(
            "INSERT INTO jobs (id, type, queue, payload, status, max_attempts, run_at,"
            " created_at, updated_at) VALUES ('manual', 'noop', 'default', '{}', 'pending', 3, 0, 0, 0)"
        )
        blocker.execute("COMMIT")
        thread.join(20)
    assert not thread.is_alive()
    assert queue.get("manual").status is JobStatus.COMPLETED
    blocker.close()


def test_until_empty_leaves_future_jobs_and_max_jobs_stops_early(queue: Queue) -> None:
    later = queue.enqueue("noop", {}, delay=3600).job
    for _ in range(5):
        queue.enqueue("noop", {})
    worker = drain(queue, until_empty=False, max_jobs=3, concurrency=1)
    assert worker.stats["completed"] == 3
    assert len(queue.list_jobs(statuses=["pending"])) == 2
    drain(queue)
    assert queue.get(later.id).status is JobStatus.SCHEDULED
    assert len(queue.list_jobs(statuses=["completed"])) == 5


def test_in_process_enqueue_wakes_an_idle_worker(jobcore_make_queue: MakeQueue) -> None:
    queue = jobcore_make_queue(tp, poll_interval=60.0, wake_check_interval=60.0)
    worker, thread = start_worker(queue)
    time.sleep(0.2)  # idle: claimed nothing, next poll is a minute away
    job = queue.enqueue("noop", {}).job
    # far sooner than the next poll a minute away, with room for a loaded machine
    wait_for(lambda: queue.get(job.id).status is JobStatus.COMPLETED, timeout=30)
    worker.stop()
    thread.join(10)


def test_only_registered_types_are_claimed(jobcore_make_queue: MakeQueue, jobcore_db: str) -> None:
    hub = jobcore_make_queue(allow_unregistered_types=True)
    foreign = hub.enqueue("remote_only", {"x": 1}).job
    local = hub.enqueue("noop", {}).job
    drain(hub)
    assert hub.get(foreign.id).status is JobStatus.PENDING
    assert hub.get(local.id).status is JobStatus.COMPLETED


def test_outbox_transaction_commits_or_rolls_back_with_application_rows(queue: Queue) -> None:
    with queue.transaction() as conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT)")
    with pytest.raises(RuntimeError), queue.transaction() as conn:
        conn.execute("INSERT INTO orders (item) VALUES ('lost')")
        queue.enqueue("noop", {})
        raise RuntimeError("payment declined")
    assert queue.list_jobs() == []
    with queue.transaction() as conn:
        conn.execute("INSERT INTO orders (item) VALUES ('book')")
        queue.enqueue("noop", {})
    with queue.transaction() as conn:
        assert conn.execute("SELECT item FROM orders").fetchall() == [("book",)]
    assert len(queue.list_jobs()) == 1


def test_a_full_claim_is_followed_by_another_without_waiting_for_the_poll(
    jobcore_make_queue: MakeQueue,
) -> None:
    queue = jobcore_make_queue(tp, poll_interval=60.0, wake_check_interval=60.0, prefetch=0)
    for _ in range(30):
        queue.enqueue("noop", {})
    worker, thread = start_worker(queue, concurrency=1, until_empty=True)
    thread.join(30)  # without the follow-up claim this takes a poll interval per job
    assert not thread.is_alive()
    assert worker.stats["completed"] == 30


def max_claimed_while(thread: threading.Thread, queue: Queue) -> int:
    seen = 0
    while thread.is_alive():
        seen = max(seen, queue.storage.count_by_status().get("claimed", 0))
        time.sleep(0.005)
    return seen


def test_short_jobs_are_prefetched_long_ones_are_not(
    jobcore_make_queue: MakeQueue, tmp_path: Path
) -> None:
    short = jobcore_make_queue(tp, prefetch=8, db=str(tmp_path / "short.db"))
    for _ in range(300):
        short.enqueue("noop", {"sleep": 0.002})
    _, thread = start_worker(short, concurrency=1, until_empty=True)
    assert max_claimed_while(thread, short) > 1
    long = jobcore_make_queue(tp, prefetch=8, db=str(tmp_path / "long.db"))
    for _ in range(4):
        long.enqueue("sleepy", {"seconds": 0.2})
    _, thread = start_worker(long, concurrency=1, until_empty=True)
    assert max_claimed_while(thread, long) == 1


def test_stop_gives_back_prefetched_jobs_at_once(jobcore_make_queue: MakeQueue) -> None:
    queue = jobcore_make_queue(tp, prefetch=10, shutdown_timeout=30)
    for _ in range(200):
        queue.enqueue("noop", {"sleep": 0.01})
    worker, thread = start_worker(queue, concurrency=1)
    wait_for(lambda: worker.stats["completed"] >= 20)
    started = time.monotonic()
    worker.stop()
    thread.join(10)
    assert not thread.is_alive() and time.monotonic() - started < 5
    counts = queue.storage.count_by_status()
    assert "claimed" not in counts
    assert counts["completed"] + counts["pending"] == 200
    assert all(job.attempts == 0 for job in queue.list_jobs(statuses=["pending"], limit=200))
