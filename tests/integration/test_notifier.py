"""A plugin stuck in a notification hook holds up only itself (jobcore.notifier).

Before, every hook of every plugin ran on one notifier thread behind an unbounded
queue: one `jobcore_job_failed` that never returned silenced every later
lifecycle log line and every other plugin's hooks for the life of the worker,
with no warning, while notices piled up in memory.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import jobcore_test_plugin as tp
import pytest

from jobcore import Job, Queue, Worker, hookimpl
from jobcore.plugins import notify
from jobcore.testing import HookRecorder

MakeQueue = Callable[..., Queue]


class Stuck:
    """Stuck in its first call of `hook` until released; records what it is given."""

    def __init__(self, hook: str) -> None:
        self.hook = hook
        self.entered = threading.Event()
        self.release = threading.Event()
        self.seen: list[tuple[str, str]] = []  # (event, job id)

    def _called(self, event: str, job: Job) -> None:
        self.seen.append((event, job.id))
        if event == self.hook and not self.entered.is_set():
            self.entered.set()
            self.release.wait(60)

    @hookimpl
    def jobcore_job_claimed(self, job: Job) -> None:
        self._called("claimed", job)

    @hookimpl
    def jobcore_job_completed(self, job: Job) -> None:
        self._called("completed", job)

    @hookimpl
    def jobcore_job_failed(self, job: Job) -> None:
        self._called("failed", job)

    @hookimpl
    def jobcore_worker_stopped(self, worker: str) -> None:
        self.seen.append(("worker_stopped", worker))


@pytest.fixture
def fast_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("jobcore.notifier.STUCK_AFTER", 0.5, raising=False)
    monkeypatch.setattr("jobcore.notifier.WATCH_EVERY", 0.1, raising=False)


@pytest.fixture
def stuck_plugins() -> Iterator[list[Stuck]]:
    made: list[Stuck] = []
    yield made
    for plugin in made:
        plugin.release.set()


def until(check: Callable[[], Any], seconds: float = 20) -> Any:
    deadline = time.monotonic() + seconds
    while not (answer := check()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)
    return answer


def running(queue: Queue) -> tuple[Worker, threading.Thread]:
    worker = Worker(queue, install_signal_handlers=False, poll_interval=0.05)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return worker, thread


def lines(caplog: pytest.LogCaptureFixture, logger: str, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger and text in r.getMessage()]


@pytest.mark.usefixtures("fast_watch")
def test_a_hung_hook_holds_up_only_its_own_plugin(
    jobcore_make_queue: MakeQueue,
    stuck_plugins: list[Stuck],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    hung = Stuck("failed")
    stuck_plugins.append(hung)
    recorder = HookRecorder()
    queue = jobcore_make_queue(tp, hung, recorder)
    failing = queue.enqueue("fail", {"how": "permanent"}).job
    worker, thread = running(queue)
    assert hung.entered.wait(20)  # it is now inside jobcore_job_failed, for a minute
    jobs = [item.job for item in queue.enqueue_many("noop", [{} for _ in range(300)])]
    # the other plugin and the built-in event log keep getting every notification
    until(lambda: len(recorder.of("job_completed")) == 300)
    assert [call.job.id for call in recorder.of("job_failed") if call.job] == [failing.id]
    until(lambda: len(lines(caplog, "jobcore.events", "completed noop")) == 300)
    assert len(lines(caplog, "jobcore.events", f"failed fail {failing.id}")) == 1
    for job in jobs:  # a plugin's notifications about a job come in order
        events = [event for event in recorder.events(job.id) if event != "job_enqueued"]
        assert events == ["job_claimed", "job_completed"]
    # the stuck plugin is named, with its hook, once it has been stuck for STUCK_AFTER
    [warning] = until(lambda: lines(caplog, "jobcore.worker", "has been in jobcore_job_failed"))
    assert warning.startswith(f"plugin {hung_name(queue, hung)} has been in jobcore_job_failed")
    # the stuck plugin's own notifications wait for it, in order
    assert hung.seen[-1] == ("failed", failing.id)
    worker.stop()  # does not wait for a plugin already reported stuck
    thread.join(5)
    assert not thread.is_alive()
    stopping = lines(caplog, "jobcore.worker", "as the worker stops")
    assert stopping == [
        f"plugin {hung_name(queue, hung)} is still in jobcore_job_failed as the worker stops: "
        "602 notification(s) for it not delivered"
    ]
    hung.release.set()
    until(lambda: len(hung.seen) == 1 + 1 + 600 + 1)  # claimed, failed, what waited, stopped
    for job in jobs:  # in order for each job, after what it was stuck in
        assert [event for event, i in hung.seen[2:] if i == job.id] == ["claimed", "completed"]
    assert hung.seen[-1] == ("worker_stopped", worker.worker_id)
    assert lines(caplog, "jobcore.worker", "returned after") == []  # the worker had stopped


def hung_name(queue: Queue, plugin: object) -> str:
    return next(name for name, p in queue.pm.list_name_plugin() if p is plugin)


@pytest.mark.usefixtures("fast_watch")
def test_a_stuck_plugin_holds_at_most_its_backlog_and_reports_what_it_drops(
    jobcore_make_queue: MakeQueue,
    stuck_plugins: list[Stuck],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("jobcore.notifier.BACKLOG", 50, raising=False)
    caplog.set_level(logging.INFO)
    hung = Stuck("claimed")
    stuck_plugins.append(hung)
    queue = jobcore_make_queue(tp, hung)
    first = queue.enqueue("noop", {}).job
    worker, thread = running(queue)
    assert hung.entered.wait(20)
    queue.enqueue_many("noop", [{} for _ in range(400)])
    until(lambda: worker.stats["completed"] == 401)
    name = hung_name(queue, hung)
    lane = worker.notifier.lanes[name]
    until(lambda: lane.dropped == 2 * 401 - 50)  # bounded: 50 held, the rest dropped, counted
    assert lane.held == 50
    [dropped] = lines(caplog, "jobcore.worker", f"plugin {name} is behind")
    assert dropped.startswith(f"plugin {name} is behind: ")
    assert dropped.endswith("it may hold 50)")
    until(lambda: lines(caplog, "jobcore.worker", f"plugin {name} has been in jobcore_job_claimed"))
    hung.release.set()  # it returns: that is reported too, and what it held arrives in order
    until(lambda: lines(caplog, "jobcore.worker", f"plugin {name} returned after"))
    until(lambda: len(hung.seen) == 50)
    assert hung.seen[0] == ("claimed", first.id)
    got = {job_id: [e for e, i in hung.seen if i == job_id] for _, job_id in hung.seen}
    assert all(events in (["claimed"], ["claimed", "completed"]) for events in got.values())
    assert got[first.id] == ["claimed", "completed"]
    worker.stop()
    thread.join(10)
    assert not thread.is_alive()
    assert lines(caplog, "jobcore.worker", f"({lane.dropped} in all"), "the total is logged"


@pytest.mark.usefixtures("fast_watch")
def test_a_full_lane_still_takes_the_workers_stop(
    jobcore_make_queue: MakeQueue, stuck_plugins: list[Stuck], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`jobcore_worker_stopped` is where plugins flush what they hold (otel's spans, dlq's
    webhooks): a lane full of job notices drops newer job notices, never that one."""
    monkeypatch.setattr("jobcore.notifier.BACKLOG", 5, raising=False)
    hung = Stuck("claimed")
    stuck_plugins.append(hung)
    queue = jobcore_make_queue(tp, hung)
    queue.enqueue("noop", {})
    worker, thread = running(queue)
    assert hung.entered.wait(20)
    queue.enqueue_many("noop", [{} for _ in range(20)])
    until(lambda: worker.stats["completed"] == 21)
    lane = worker.notifier.lanes[hung_name(queue, hung)]
    until(lambda: lane.dropped > 0)  # full: job notices are being dropped
    worker.stop()
    thread.join(20)
    assert not thread.is_alive()
    hung.release.set()
    until(lambda: ("worker_stopped", worker.worker_id) in hung.seen)
    assert hung.seen[-1] == ("worker_stopped", worker.worker_id)


def test_notices_handed_from_other_threads_are_delivered_per_plugin(
    jobcore_make_queue: MakeQueue, stuck_plugins: list[Stuck]
) -> None:
    """What the keeper hands over (`Notifier.put`: the sweep's reclaimed/failed/cancelled
    notices) goes the same way: the event log and other plugins are not held up."""
    hung = Stuck("failed")
    stuck_plugins.append(hung)
    recorder = HookRecorder()
    queue = jobcore_make_queue(tp, hung, recorder)
    jobs = [item.job for item in queue.enqueue_many("noop", [{}, {}])]
    worker = Worker(queue, install_signal_handlers=False)
    worker.notifier.start()
    try:
        worker.notifier.put(
            [partial(notify, queue.pm, "jobcore_job_failed", job=job, error="x") for job in jobs]
        )
        assert hung.entered.wait(20)
        until(lambda: len(recorder.of("job_failed")) == 2)
    finally:
        hung.release.set()
        worker.notifier.stop()
    assert hung.seen == [("failed", job.id) for job in jobs]
