"""Hostile handlers and faults inside one worker process (issue 8, defects 1-12).

Each test names the defect it guards. Faults that need a real process
(SIGKILL, SIGTERM, a shell's grandchild) are in tests/acceptance/test_processes.py.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw
import jobcore_test_plugin as tp
import pytest
from attempts import noop_attempt
from pydantic import model_validator
from testenv import wait_for

from jobcore import (
    JobContext,
    JobStatus,
    JobType,
    Payload,
    Queue,
    RetryAfter,
    Worker,
    hookimpl,
)
from jobcore.attempt import describe_error
from jobcore.errors import StorageIOError
from jobcore.inflight import IllegalMove, InFlight, Phase
from jobcore.models import Completed, Released
from jobcore.storage.sqlite import SQLiteStorage
from jobcore.testing import HookRecorder
from jobcore.timeutil import now_ms
from jobcore.transitions import clamp_delay_ms

MakeQueue = Callable[..., Queue]
WEEK_MS = 7 * 86_400_000


class BadStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no message for you")


class DelayPayload(Payload):
    seconds: float | str  # "inf", "nan": a payload cannot hold them as numbers (not JSON)


class ChildPayload(Payload):
    priority: int


class DeployedPayload(Payload):
    """A model changed by a deploy: its validator now raises KeyError for some stored rows."""

    n: int
    broken: bool = False

    @model_validator(mode="after")
    def _lookup(self) -> DeployedPayload:
        if self.broken and Hostile.deployed:
            raise KeyError(f"no such tenant {self.n}")
        return self


class Hostile:
    """Job types that misbehave in the ways issue 8 lists."""

    deployed = False

    @hookimpl
    def jobcore_register_job_types(self, register: Callable[[JobType], None]) -> None:
        register(JobType(name="bad_str", payload_model=Payload, handler=self.bad_str))
        register(JobType(name="retry_in", payload_model=DelayPayload, handler=self.retry_in))
        register(JobType(name="huge_child", payload_model=ChildPayload, handler=self.huge_child))
        register(JobType(name="deployed", payload_model=DeployedPayload, handler=self.deployed_run))

    @staticmethod
    def bad_str(payload: Payload, ctx: JobContext) -> None:
        raise BadStr()

    @staticmethod
    def retry_in(payload: DelayPayload, ctx: JobContext) -> None:
        raise RetryAfter(float(payload.seconds))

    @staticmethod
    def huge_child(payload: ChildPayload, ctx: JobContext) -> str:
        ctx.enqueue("noop", {}, priority=payload.priority)
        return "spawned"

    @staticmethod
    def deployed_run(payload: DeployedPayload, ctx: JobContext) -> int:
        return payload.n


@pytest.fixture
def queue(jobcore_make_queue: MakeQueue, jobcore_recorder: HookRecorder) -> Queue:
    return jobcore_make_queue(tp, Hostile(), jobcore_recorder)


def start_worker(queue: Queue, **options: Any) -> tuple[Worker, threading.Thread]:
    worker = Worker(queue, **options)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return worker, thread


def finish(worker: Worker, thread: threading.Thread, timeout: float = 20.0) -> None:
    """Join an until-empty worker; a worker that would hang is stopped and the test fails."""
    thread.join(timeout)
    if thread.is_alive():
        worker.stop(graceful=False)
        thread.join(10)
        raise AssertionError("the worker did not finish: a job is stuck in flight")


# -- defect 1: an executor thread can die and leave its job claimed for ever -------------


def test_an_exception_whose_str_raises_is_recorded_and_the_executor_lives_on(queue: Queue) -> None:
    bad = queue.enqueue("bad_str", {}, max_attempts=1).job
    after = [queue.enqueue("noop", {}, priority=-1).job for _ in range(3)]
    worker, thread = start_worker(queue, concurrency=1, until_empty=True)
    finish(worker, thread)
    failed = queue.get(bad.id)
    assert failed.status is JobStatus.FAILED
    assert failed.last_error == "BadStr: (message unreadable: its __str__ raised RuntimeError)"
    # the single executor survived and ran the rest
    assert all(queue.get(job.id).status is JobStatus.COMPLETED for job in after)


@pytest.mark.parametrize(
    ("seconds", "expected_ms"),
    [(math.inf, WEEK_MS), (1e300, WEEK_MS), (math.nan, 0)],
    ids=["inf", "1e300", "nan"],
)
def test_retry_after_from_outside_is_clamped(
    queue: Queue, seconds: float, expected_ms: int
) -> None:
    job = queue.enqueue("retry_in", {"seconds": str(seconds)}, max_attempts=2).job
    other = queue.enqueue("noop", {}).job
    before = now_ms()
    worker, thread = start_worker(queue, until_empty=True)
    finish(worker, thread)
    assert queue.get(other.id).status is JobStatus.COMPLETED
    retried = queue.get(job.id)
    if expected_ms:  # waits out the clamped delay
        assert retried.status is JobStatus.SCHEDULED and retried.attempts == 1
        assert before + expected_ms <= retried.run_at <= now_ms() + expected_ms
    else:  # NaN counts as no delay: retried at once, then attempts are used up
        assert retried.status is JobStatus.FAILED and retried.attempts == 2


def test_max_retry_delay_is_a_setting(jobcore_make_queue: MakeQueue) -> None:
    queue = jobcore_make_queue(Hostile(), max_retry_delay="90s")
    job = queue.enqueue("retry_in", {"seconds": 3600}).job
    before = now_ms()
    worker, thread = start_worker(queue, until_empty=True)
    finish(worker, thread)
    assert before + 90_000 <= queue.get(job.id).run_at <= now_ms() + 90_000


def test_clamp_delay_ms_and_describe_error_take_anything() -> None:
    values = (math.nan, -5.0, -math.inf, 0.0, 2500.0, math.inf, 1e300)
    assert [clamp_delay_ms(v, 60_000) for v in values] == [0, 0, 0, 0, 2500, 60_000, 60_000]
    assert describe_error(BadStr()).startswith("BadStr: (message unreadable")
    long = describe_error(ValueError("x" * 100_000))
    assert len(long) < 5000 and long.endswith("(100000 characters)")


# -- defect 2: one poison outcome jams group commit for ever ------------------------------


def test_an_outcome_the_store_refuses_fails_that_job_alone(queue: Queue) -> None:
    # The application's own trigger refuses this one job's completion (which also inserts
    # its child), so the store refuses that outcome; its failure is still writable.
    poison = queue.enqueue("huge_child", {"priority": 5}).job
    ok = [queue.enqueue("noop", {"sleep": 0.01}).job for _ in range(6)]
    with queue.transaction() as conn:
        conn.execute(
            f"CREATE TRIGGER refuse BEFORE UPDATE ON jobs WHEN OLD.id = '{poison.id}' "
            "AND NEW.status = 'completed' BEGIN SELECT RAISE(ABORT, 'refused by the app'); END"
        )
    worker, thread = start_worker(queue, until_empty=True)
    finish(worker, thread)
    failed = queue.get(poison.id)
    assert failed.status is JobStatus.FAILED
    assert "refused by the app" in (failed.last_error or "")
    assert all(queue.get(job.id).status is JobStatus.COMPLETED for job in ok)
    assert [job.id for job in queue.list_jobs(limit=100) if job.parent_id] == []


def test_heartbeats_go_on_while_outcomes_cannot_be_recorded(
    jobcore_make_queue: MakeQueue, jobcore_db: str, tmp_path: Path
) -> None:
    queue = jobcore_make_queue(tp)
    marker = tmp_path / "started"
    long = queue.enqueue("sleepy", {"seconds": 1.5, "started": str(marker)}).job
    short = queue.enqueue("noop", {}).job
    # The application's own trigger refuses every outcome of the short job, failure included.
    with queue.transaction() as conn:
        conn.execute(
            f"CREATE TRIGGER refuse BEFORE UPDATE ON jobs WHEN OLD.id = '{short.id}' "
            "AND NEW.status NOT IN ('claimed') BEGIN SELECT RAISE(ABORT, 'refused'); END"
        )
    worker, thread = start_worker(queue, lease=0.4, until_empty=True)
    wait_for(marker.exists)
    checker = SQLiteStorage(jobcore_db)
    deadline = time.monotonic() + 1.2
    while time.monotonic() < deadline:  # the long job's lease never expires meanwhile
        assert checker.sweep(force=True) == []
        time.sleep(0.05)
    with queue.transaction() as conn:
        conn.execute("DROP TRIGGER refuse")
    finish(worker, thread)
    checker.close()
    done = queue.get(long.id)
    assert done.status is JobStatus.COMPLETED and done.attempts == 1 and done.errors == []
    assert queue.get(short.id).status is JobStatus.COMPLETED


# -- defect 3: a validator raising something else leaves the job in flight for ever -------


def test_a_job_that_cannot_be_started_fails_alone_and_the_batch_runs(queue: Queue) -> None:
    jobs = [queue.enqueue("deployed", {"n": n, "broken": n == 2}).job for n in range(5)]
    Hostile.deployed = True
    try:
        worker, thread = start_worker(queue, concurrency=2, until_empty=True)
        finish(worker, thread)
    finally:
        Hostile.deployed = False
    broken = queue.get(jobs[2].id)
    assert broken.status is JobStatus.FAILED and broken.attempts == 1
    assert broken.last_error == "cannot start: KeyError: 'no such tenant 2'"
    for job in jobs[:2] + jobs[3:]:
        done = queue.get(job.id)
        assert done.status is JobStatus.COMPLETED and done.attempts == 1 and done.errors == []


# -- defect 4 and 10: release only after the handler stopped; a report wins -------------


def test_a_handler_that_finishes_when_asked_to_stop_is_completed_not_released(
    queue: Queue, tmp_path: Path
) -> None:
    marker = tmp_path / "started"

    class Finisher:
        @hookimpl
        def jobcore_register_job_types(self, register: Callable[[JobType], None]) -> None:
            def finish_up(payload: Payload, ctx: JobContext) -> str:
                marker.write_text("started")
                ctx.wait(30)  # returns once shutdown's deadline asks it to stop
                time.sleep(0.2)  # wraps up its work
                return "wrapped up"

            register(JobType(name="finisher", payload_model=Payload, handler=finish_up))

    queue.pm.register(Finisher(), name="finisher")
    queue.registry = queue._collect_job_types()
    job = queue.enqueue("finisher", {}).job
    worker, thread = start_worker(queue, shutdown_timeout=0.1)
    wait_for(marker.exists)
    worker.stop()
    thread.join(20)
    assert not thread.is_alive() and worker.exit_code == 0
    done = queue.get(job.id)
    assert done.status is JobStatus.COMPLETED and done.result == "wrapped up"


def test_a_handler_that_ignores_stop_is_released_after_the_grace(
    jobcore_make_queue: MakeQueue, tmp_path: Path
) -> None:
    queue = jobcore_make_queue(tp, stop_grace=0.3)
    marker = tmp_path / "started"
    job = queue.enqueue("sleepy", {"seconds": 30, "started": str(marker)}).job
    worker, thread = start_worker(queue, shutdown_timeout=0.1)
    wait_for(marker.exists)
    worker.stop()
    thread.join(20)
    assert not thread.is_alive() and worker.exit_code == 0
    released = queue.get(job.id)
    assert released.status is JobStatus.PENDING and released.attempts == 0


def test_the_in_flight_table_lets_a_report_win_and_refuses_late_moves(queue: Queue) -> None:
    cond = threading.Condition()
    table = InFlight(cond)
    waiter = threading.Event()
    # a release decided first: the executor may no longer begin it
    waiting = noop_attempt(queue, claimed_at=time.monotonic())
    table.add(waiting)
    assert table.try_move(waiting, Phase.REPORTED, Released(lease=waiting.lease))
    assert not table.begin(waiting, waiter)
    # a report first: shutdown's stop and its fallback release change nothing
    running = noop_attempt(queue, claimed_at=time.monotonic())
    table.add(running)
    assert table.begin(running, waiter)
    assert table.start(running) is None  # its start marker has not committed yet
    assert table.take_began() == [running]
    assert table.marked([running], {running.job.id}) == [] and waiter.is_set()
    assert table.start(running) is True
    done = Completed(lease=running.lease, result=1)
    assert table.report(running, done) == (True, False)
    assert not table.stop(running, "shutdown", Released(lease=running.lease), 0.0)
    assert not table.try_move(running, Phase.REPORTED, Released(lease=running.lease))
    assert running.outcome is done and running.ctx.stop_reason is None
    # asked to stop first: its own report still wins over the fallback
    stopping = noop_attempt(queue, claimed_at=time.monotonic())
    table.add(stopping)
    table.begin(stopping, waiter)
    table.marked([stopping], None)
    table.start(stopping)
    assert table.stop(stopping, "shutdown", Released(lease=stopping.lease), time.monotonic() + 5)
    late = Completed(lease=stopping.lease, result=2)
    assert table.report(stopping, late) == (True, False)
    assert stopping.outcome is late
    assert table.report(stopping, late) == (False, False)  # reported once only
    with pytest.raises(IllegalMove):
        table.move(stopping, Phase.STARTED)


def test_a_starting_attempt_runs_only_once_its_marker_took(queue: Queue) -> None:
    """Crash accounting: between an executor taking a job and its start marker committing,
    the loop may still give it back; a marker that did not take (lease gone) never runs."""
    table = InFlight(threading.Condition())
    waiter = threading.Event()
    given_back = noop_attempt(queue, claimed_at=time.monotonic())
    table.add(given_back)
    assert table.begin(given_back, waiter) and not waiter.is_set()
    assert table.try_move(given_back, Phase.REPORTED, Released(lease=given_back.lease))
    assert waiter.is_set() and table.start(given_back) is False and not given_back.ran
    waiter.clear()
    unheld = noop_attempt(queue, claimed_at=time.monotonic())
    table.add(unheld)
    table.begin(unheld, waiter)
    assert table.marked([unheld], set()) == [unheld]
    assert table.start(unheld) is None and not unheld.start_marked
    # the next attempt is begun in the same step as the report of the previous one
    first, second = (
        noop_attempt(queue, claimed_at=time.monotonic()),
        noop_attempt(queue, claimed_at=time.monotonic()),
    )
    table.add(first)
    table.add(second)
    table.begin(first, waiter)
    table.take_began()
    table.marked([first], None)
    table.start(first)
    assert table.report(first, Completed(lease=first.lease, result=None), second, waiter) == (
        True,
        True,
    )
    assert second.phase is Phase.STARTING and table.take_inbox() == [first]
    assert table.take_began() == [second]


# -- defect 5: a cancelled prefetched job still ran -------------------------------------


def prefetch_setup(queue: Queue, tmp_path: Path, blocker_seconds: float) -> tuple[str, list[str]]:
    """Three short jobs, then a blocker, then record jobs that wait prefetched behind it."""
    for _ in range(3):
        queue.enqueue("noop", {}, priority=10)
    blocker = queue.enqueue(
        "sleepy",
        {"seconds": blocker_seconds, "started": str(tmp_path / "started"), "cooperative": True},
        priority=5,
    ).job
    log = tmp_path / "runs.log"
    waiting = [queue.enqueue("record", {"log": str(log)}).job.id for _ in range(4)]
    return blocker.id, waiting


def test_a_prefetched_job_cancelled_before_it_starts_never_runs(
    jobcore_make_queue: MakeQueue, tmp_path: Path, jobcore_recorder: HookRecorder
) -> None:
    queue = jobcore_make_queue(tp, jobcore_recorder, prefetch_below=10.0, prefetch_wait=60.0)
    blocker, waiting = prefetch_setup(queue, tmp_path, blocker_seconds=2.0)
    worker, thread = start_worker(queue, concurrency=1, prefetch=8, until_empty=True)
    wait_for((tmp_path / "started").exists)
    assert {queue.get(job_id).status for job_id in waiting} == {JobStatus.CLAIMED}  # prefetched
    queue.cancel(waiting)
    finish(worker, thread)
    assert {queue.get(job_id).status for job_id in waiting} == {JobStatus.CANCELLED}
    assert not (tmp_path / "runs.log").exists()  # none of them ran
    assert queue.get(blocker).status is JobStatus.COMPLETED
    assert all("job_cancelled" in jobcore_recorder.events(job_id) for job_id in waiting)


# -- defect 6: a cancel request survived a retry ------------------------------------------


def test_a_cancel_request_wins_over_the_retry_the_handler_reported(
    queue: Queue, jobcore_db: str, jobcore_recorder: HookRecorder
) -> None:
    operator = SQLiteStorage(jobcore_db)

    class CancelledMidway:
        @hookimpl
        def jobcore_register_job_types(self, register: Callable[[JobType], None]) -> None:
            def handler(payload: Payload, ctx: JobContext) -> None:
                operator.cancel([ctx.job.id])  # an operator cancels while it runs...
                raise ValueError("then it fails")  # ...and it fails before noticing

            register(JobType(name="cancelled_midway", payload_model=Payload, handler=handler))

    queue.pm.register(CancelledMidway(), name="cancelled-midway")
    queue.registry = queue._collect_job_types()
    job = queue.enqueue("cancelled_midway", {}, max_attempts=3).job
    worker, thread = start_worker(queue, until_empty=True)
    finish(worker, thread)
    operator.close()
    cancelled = queue.get(job.id)
    assert cancelled.status is JobStatus.CANCELLED and cancelled.attempts == 1
    assert jobcore_recorder.events(job.id)[-1] == "job_cancelled"
    assert "job_retrying" not in jobcore_recorder.events(job.id)
    assert worker.stats["cancelled"] == 1 and worker.stats["retrying"] == 0


# -- defect 7: prefetch holds short jobs behind a long one --------------------------------


def test_prefetched_jobs_behind_a_long_one_are_given_back_to_an_idle_worker(
    jobcore_make_queue: MakeQueue, tmp_path: Path
) -> None:
    first = jobcore_make_queue(tp, prefetch_wait=0.3)
    second = jobcore_make_queue(tp)
    blocker, waiting = prefetch_setup(first, tmp_path, blocker_seconds=30.0)
    a, a_thread = start_worker(first, concurrency=1, prefetch=8, worker_id="A")
    wait_for((tmp_path / "started").exists)
    b, b_thread = start_worker(second, concurrency=1, worker_id="B")
    wait_for(lambda: all(first.get(job_id).status is JobStatus.COMPLETED for job_id in waiting))
    assert first.get(blocker).status is JobStatus.CLAIMED  # still running in A
    runs = [line.split() for line in (tmp_path / "runs.log").read_text().splitlines()]
    assert sorted(job_id for job_id, _, _ in runs) == sorted(waiting)
    assert {worker for _, _, worker in runs} == {"B"}
    assert {attempt for _, attempt, _ in runs} == {"1"}  # giving back spent no attempt
    for worker, thread in ((a, a_thread), (b, b_thread)):
        worker.stop(graceful=False)
        thread.join(20)
        assert not thread.is_alive()


def test_two_workers_giving_back_prefetched_jobs_run_each_job_once(
    jobcore_make_queue: MakeQueue, tmp_path: Path
) -> None:
    """Give-backs race the other worker's claims: nothing is lost, nothing runs twice."""
    log = tmp_path / "runs.log"
    queues = [jobcore_make_queue(tp, prefetch_wait=0.05) for _ in range(2)]
    for index in range(300):
        queues[0].enqueue("record", {"log": str(log), "sleep": 0.2 if index % 50 == 0 else 0.0})
    workers = [
        start_worker(queue, concurrency=2, prefetch=16, worker_id=f"w{n}", until_empty=True)
        for n, queue in enumerate(queues)
    ]
    for worker, thread in workers:
        finish(worker, thread, timeout=60)
    runs = [line.split()[0] for line in log.read_text().splitlines()]
    assert len(runs) == 300 and len(set(runs)) == 300
    counts = queues[0].storage.count_by_status()
    assert counts == {"completed": 300}


# -- defect 9: a database error inside the wait kills the loop ---------------------------


class FlakyWaitStorage(SQLiteStorage):
    """The real SQLite backend whose change check fails a few times (a thread-level fault)."""

    failures = 3

    def wait_for_change(self, timeout: float) -> bool:
        if FlakyWaitStorage.failures > 0:
            FlakyWaitStorage.failures -= 1
            raise StorageIOError("disk I/O error (injected)")
        return super().wait_for_change(timeout)


class FlakyWaitBackend:
    @hookimpl(tryfirst=True)
    def jobcore_storage_backend(self, url: str, config: Any, create: bool) -> SQLiteStorage:
        return FlakyWaitStorage(url, busy_timeout=config.core.busy_timeout, create=create)


def test_a_database_error_while_waiting_backs_off_and_the_loop_lives(
    jobcore_make_queue: MakeQueue, caplog: pytest.LogCaptureFixture
) -> None:
    FlakyWaitStorage.failures = 0
    queue = jobcore_make_queue(tp, FlakyWaitBackend())
    queue.storage.migrate()
    worker, thread = start_worker(queue)
    time.sleep(0.1)  # idle, watching for other processes' commits
    FlakyWaitStorage.failures = 3
    wait_for(lambda: FlakyWaitStorage.failures == 0)
    other = jobcore_make_queue(tp)  # another process's enqueue: no in-process wake-up
    job = other.enqueue("noop", {}).job
    wait_for(lambda: queue.get(job.id).status is JobStatus.COMPLETED, timeout=15)
    assert thread.is_alive()
    assert any("disk I/O error (injected)" in r.getMessage() for r in caplog.records)
    worker.stop()
    thread.join(10)
    assert not thread.is_alive() and worker.exit_code == 0


def test_a_worker_starting_on_a_locked_new_database_backs_off(
    jobcore_make_queue: MakeQueue, jobcore_db: str, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = apsw.Connection(jobcore_db)
    blocker.execute("BEGIN IMMEDIATE")  # the schema cannot be created yet
    queue = jobcore_make_queue(tp, busy_timeout=0.05)
    worker, thread = start_worker(queue, until_empty=True)
    wait_for(lambda: any("database error at start" in r.getMessage() for r in caplog.records))
    assert thread.is_alive()
    blocker.execute("COMMIT")
    blocker.close()
    finish(worker, thread)
    assert worker.exit_code == 0


# -- defect 11: the retry ran beside the abandoned handler ---------------------------------


def test_a_timed_out_job_is_not_run_again_while_its_handler_still_runs(
    jobcore_make_queue: MakeQueue, tmp_path: Path
) -> None:
    queue = jobcore_make_queue(tp, stop_grace=10.0)
    log = tmp_path / "spans.log"
    job = queue.enqueue("span", {"log": str(log), "seconds": 1.0}, timeout=0.2, max_attempts=2).job
    worker, thread = start_worker(queue, concurrency=2, until_empty=True)
    finish(worker, thread, timeout=30)
    failed = queue.get(job.id)
    assert failed.status is JobStatus.FAILED and failed.attempts == 2
    assert [entry["error"] for entry in failed.errors] == ["JobTimeout: timed out after 0.2s"] * 2
    spans: dict[str, dict[str, float]] = {}
    for line in log.read_text().splitlines():
        mark, _, attempt, at = line.split()
        spans.setdefault(attempt, {})[mark] = float(at)
    assert spans["2"]["start"] >= spans["1"]["end"]  # never two runs at once


# -- defect 12: --max-jobs hangs when a run is lost (Python API side) --------------------


def test_max_jobs_counts_a_run_whose_lease_was_lost(queue: Queue, tmp_path: Path) -> None:
    marker = tmp_path / "started"
    job = queue.enqueue("sleepy", {"seconds": 30, "cooperative": True, "started": str(marker)}).job
    worker, thread = start_worker(queue, lease=0.4, max_jobs=1)
    wait_for(marker.exists)
    # As if this worker had been paused past its lease: the lease runs out and a sweep
    # (any worker's) takes the job back.
    with queue.transaction() as conn:
        conn.execute("UPDATE jobs SET lease_expires_at = 0 WHERE id = ?", (job.id,))
    queue.sweep()
    finish(worker, thread)
    assert worker.finished == 1 and worker.exit_code == 0
    assert queue.get(job.id).status is JobStatus.PENDING  # for the next worker to run
