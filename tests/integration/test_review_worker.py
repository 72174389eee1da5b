"""Review of issue 8 through the Python API: damaged rows, hostile plugins, odd values."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar

import apsw
import jobcore_test_plugin as tp
import pytest

from jobcore import JobStatus, JobType, Payload, Queue, Worker, hookimpl
from jobcore.errors import InvalidPayload, StorageBusy, StorageFull
from jobcore.models import Completed
from jobcore.testing import HookRecorder

MakeQueue = Callable[..., Queue]


@pytest.fixture
def queue(jobcore_make_queue: MakeQueue, jobcore_recorder: HookRecorder) -> Queue:
    return jobcore_make_queue(tp, jobcore_recorder)


def drain(queue: Queue, timeout: float = 20.0, **options: Any) -> Worker:
    """Run an until-empty worker; one that would hang is stopped and the test fails."""
    worker = Worker(queue, until_empty=True, **options)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        worker.stop(graceful=False)
        thread.join(10)
        raise AssertionError("the worker did not finish: a job is stuck or claims are jammed")
    return worker


def damage(queue: Queue, job_id: str, column: str, value: Any) -> None:
    """Write a value of the wrong type into one column, as a hand edit or another tool might."""
    conn = apsw.Connection(queue.url)
    try:
        conn.execute(f"UPDATE jobs SET {column} = ? WHERE id = ?", (value, job_id))
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("column", "value"),
    [("priority", "high"), ("run_at", "tomorrow"), ("timeout_ms", "soon"), ("priority", b"\x00")],
)
def test_a_row_with_a_damaged_integer_column_does_not_jam_claims(
    queue: Queue, column: str, value: Any
) -> None:
    """One row holding text in an integer column made every claim raise (the claim sorts
    by priority and run_at in Python; the executor divides timeout_ms), so no worker ever
    claimed anything again, or the executor died with the job `claimed` for ever."""
    jobs = [queue.enqueue("noop", {}).job for _ in range(3)]
    damage(queue, jobs[1].id, column, value)
    drain(queue)
    statuses = {job.id: queue.get(job.id).status for job in jobs}
    assert statuses[jobs[0].id] is JobStatus.COMPLETED
    assert statuses[jobs[2].id] is JobStatus.COMPLETED
    assert statuses[jobs[1].id] in (JobStatus.COMPLETED, JobStatus.FAILED)
    assert queue.get(jobs[1].id) is not None  # still readable (list, show)


class MetaGarbage:
    """A plugin whose meta hook returns values that cannot be stored as JSON."""

    @hookimpl
    def jobcore_enqueue_meta(self, job: Any) -> dict[str, Any]:
        return {"handle": object()}


class MetaFine:
    @hookimpl
    def jobcore_enqueue_meta(self, job: Any) -> dict[str, Any]:
        return {"trace": "00-abc"}


def test_a_meta_hook_returning_unstorable_values_is_skipped(
    jobcore_make_queue: MakeQueue, tmp_path: Any
) -> None:
    """A plugin's meta that is not JSON made every enqueue raise TypeError (a traceback
    from `jobcore enqueue`) and every parent that enqueues children fail; it is skipped
    like a raising meta hook, and other plugins' meta is kept."""
    queue = jobcore_make_queue(tp, MetaGarbage(), MetaFine())
    job = queue.enqueue("noop", {}).job
    assert queue.get(job.id).meta == {"trace": "00-abc"}
    parent = queue.enqueue("parent", {"children": 2}).job
    drain(queue)
    assert queue.get(parent.id).status is JobStatus.COMPLETED
    children = [j for j in queue.list_jobs(limit=100) if j.parent_id == parent.id]
    assert len(children) == 2 and all(c.status is JobStatus.COMPLETED for c in children)


class ExitingObserver:
    """Notification hooks that raise BaseException subclasses (a plugin calling sys.exit)."""

    def __init__(self) -> None:
        self.completed: list[str] = []

    @hookimpl
    def jobcore_job_claimed(self, job: Any, worker: str) -> None:
        raise SystemExit(3)

    @hookimpl
    def jobcore_job_completed(self, job: Any, duration_ms: float) -> None:
        self.completed.append(job.id)
        raise KeyboardInterrupt


def test_a_notification_hook_raising_systemexit_does_not_silence_later_notifications(
    jobcore_make_queue: MakeQueue,
) -> None:
    """SystemExit/KeyboardInterrupt from a notification hook killed the notifier thread
    silently: every later lifecycle event (logs, metrics, completed hooks) was lost."""
    observer = ExitingObserver()
    queue = jobcore_make_queue(tp, observer)
    jobs = [queue.enqueue("noop", {}).job for _ in range(3)]
    drain(queue)
    assert sorted(observer.completed) == sorted(job.id for job in jobs)


def test_an_id_given_twice_to_cancel_or_retry_is_one_request(queue: Queue) -> None:
    """`jobcore cancel X X` failed with "already cancelled" and wrote nothing."""
    job = queue.enqueue("noop", {}).job
    [cancelled] = queue.cancel([job.id, job.id])
    assert cancelled.status is JobStatus.CANCELLED
    [retried] = queue.retry([job.id, job.id])
    assert retried.status is JobStatus.PENDING


class Measure(Payload):
    value: float = 0.0


class NonFinite:
    @hookimpl
    def jobcore_register_job_types(self, register: Callable[[JobType], None]) -> None:
        register(JobType(name="measure", payload_model=Measure, handler=self.measure))
        register(JobType(name="opaque", payload_model=Measure, handler=self.opaque))

    runs: ClassVar[list[str]] = []

    @staticmethod
    def measure(payload: Measure, ctx: Any) -> dict[str, Any]:
        return {"mean": math.nan, "range": [-math.inf, 1.5, math.inf]}

    @staticmethod
    def opaque(payload: Measure, ctx: Any) -> object:
        NonFinite.runs.append(ctx.job.id)  # the side effect
        return object()


def test_nan_and_infinity_never_reach_the_store(jobcore_make_queue: MakeQueue) -> None:
    """A result, payload or meta holding NaN/Infinity was stored as `NaN`, which is not
    JSON: `jobcore show --json` printed an invalid document (and PostgreSQL's jsonb
    refuses it). Results store them as null; payloads and meta are refused at enqueue."""
    queue = jobcore_make_queue(tp, NonFinite())
    job = queue.enqueue("measure", {}).job
    drain(queue)
    done = queue.get(job.id)
    assert done.status is JobStatus.COMPLETED
    assert done.result == {"mean": None, "range": [None, 1.5, None]}
    with pytest.raises(InvalidPayload, match="NaN or Infinity"):
        queue.enqueue("measure", {"value": math.nan})
    with pytest.raises(InvalidPayload, match="meta"):
        queue.enqueue("measure", {}, meta={"ratio": math.inf})
    with pytest.raises(InvalidPayload, match="meta"):
        queue.enqueue("measure", {}, meta={"handle": object()})


def test_a_result_that_cannot_be_stored_does_not_run_the_handler_again(
    jobcore_make_queue: MakeQueue,
) -> None:
    """A handler that did its work and returned something not JSON-serialisable was
    retried (its side effects repeated max_attempts times), then failed."""
    queue = jobcore_make_queue(tp, NonFinite())
    job = queue.enqueue("opaque", {}).job
    drain(queue)
    done = queue.get(job.id)
    assert NonFinite.runs == [job.id]
    assert done.status is JobStatus.COMPLETED and done.attempts == 1
    assert done.result["unserialisable"].startswith("TypeError")
    assert done.result["repr"].startswith("<object object")


class Bulky:
    @hookimpl
    def jobcore_register_job_types(self, register: Callable[[JobType], None]) -> None:
        register(JobType(name="bulky", payload_model=Measure, handler=self.bulky))

    @staticmethod
    def bulky(payload: Measure, ctx: Any) -> str:
        return "x" * 50_000


def test_a_disk_full_for_big_writes_does_not_turn_completions_into_failures(
    jobcore_make_queue: MakeQueue,
) -> None:
    """A nearly full disk refused the commit holding a big result; the worker split the
    batch as if that outcome were poison and recorded the job `failed` ("the store
    refused this outcome: disk full"), a short failure fitting where the result did not.
    A full, read-only or busy store says nothing about any one outcome: back off instead."""
    queue = jobcore_make_queue(tp, Bulky())
    storage = queue.storage
    real = storage.commit_batch
    refusals: list[int] = []

    def nearly_full(outcomes: Any, **options: Any) -> Any:
        if len(refusals) < 2 and any(isinstance(o, Completed) for o in outcomes):
            refusals.append(len(outcomes))
            raise StorageFull("database or disk is full")
        return real(outcomes, **options)

    storage.commit_batch = nearly_full  # type: ignore[method-assign]
    job = queue.enqueue("bulky", {}).job
    drain(queue)
    assert refusals, "the fault was not hit"
    done = queue.get(job.id)
    assert done.status is JobStatus.COMPLETED, done.last_error
    assert done.attempts == 1 and done.errors == []


def test_the_loop_does_not_spin_while_backing_off_with_starts_to_mark(
    jobcore_make_queue: MakeQueue,
) -> None:
    """A begun attempt's start marker is due within 50 ms; while the database was failing
    (backing off up to 30 s) that deadline, already past, made every wait return at once:
    the loop thread spun on a core for the whole outage."""
    queue = jobcore_make_queue(tp)
    storage = queue.storage
    real = storage.commit_batch
    failing = [False]

    def commit_batch(outcomes: Any, **options: Any) -> Any:
        if failing[0]:
            raise StorageBusy("database is locked")
        result = real(outcomes, **options)
        if result[1]:
            failing[0] = True  # fails from the commit after the claim on
        return result

    storage.commit_batch = commit_batch  # type: ignore[method-assign]
    queue.enqueue("sleepy", {"seconds": 1.5})
    worker = Worker(queue, until_empty=True)
    waits = [0]
    real_wait = worker._wait

    def counted(*deadlines: Any) -> None:
        waits[0] += 1
        real_wait(*deadlines)

    worker._wait = counted  # type: ignore[method-assign]
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    time.sleep(1.0)
    failing[0] = False
    thread.join(20)
    assert not thread.is_alive()
    assert waits[0] < 200, f"the loop woke {waits[0]} times in about a second of backoff"


def test_the_loop_does_not_spin_while_every_slot_is_busy(jobcore_make_queue: MakeQueue) -> None:
    """Once `poll_interval` passed with every slot busy, the poll deadline stayed in the
    past (no claim was wanted, so it was never moved) and every wait returned at once:
    a worker running long jobs at full concurrency spun its loop (~20k wakes a second)."""
    queue = jobcore_make_queue(tp)
    queue.enqueue("sleepy", {"seconds": 1.5})
    worker = Worker(queue, concurrency=1, until_empty=True, poll_interval=0.2)
    waits = [0]
    real_wait = worker._wait

    def counted(*deadlines: Any) -> None:
        waits[0] += 1
        real_wait(*deadlines)

    worker._wait = counted  # type: ignore[method-assign]
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    thread.join(20)
    assert not thread.is_alive()
    assert waits[0] < 200, f"the loop woke {waits[0]} times while one job ran for 1.5 s"
