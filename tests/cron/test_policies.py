"""The scheduler against a real store (SQLite file and PostgreSQL) on a test clock:
missed-run policies with every scheduler down across three scheduled times, the
once-per-time guarantee when schedulers race, and the record of runs."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
from jobcore_cron.scheduler import Scheduler
from jobcore_cron.spec import Schedule, parse_schedule
from jobcore_cron.store import CronStore, Lost, Run

from jobcore import Queue


def _ms(text: str) -> int:
    return int(datetime.fromisoformat(f"2026-01-01T{text}+00:00").timestamp() * 1000)


def _minutely(policy: str, **fields: object) -> Schedule:
    table = {"type": "noop", "every": "1m", "policy": policy, "grace": "10s", **fields}
    return parse_schedule("minutely", table, "test")


def _scheduled(queue: Queue) -> list[str]:
    """The scheduled time of each cron job in the store, oldest first."""
    jobs = queue.list_jobs(limit=1000)
    return sorted(job.meta["cron"]["scheduled_at"][11:19] for job in jobs)


@pytest.mark.parametrize(
    ("policy", "fields", "caught_up", "dropped"),
    [
        ("skip", {}, [], "3"),
        ("latest", {}, ["00:04:00"], "2"),
        ("all", {}, ["00:02:00", "00:03:00", "00:04:00"], None),
        ("all", {"catchup_window": "100s"}, ["00:03:00", "00:04:00"], "1"),
    ],
)
def test_runs_missed_while_every_scheduler_was_down(
    clocked_queue: Callable[..., Queue],
    clock: Any,
    policy: str,
    fields: dict[str, str],
    caught_up: list[str],
    dropped: str | None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    queue = clocked_queue(clock)
    scheduler = Scheduler(queue, [_minutely(policy, **fields)])
    scheduler.tick()  # first seen: starts from now, nothing enqueued
    assert _scheduled(queue) == []
    clock.now = _ms("00:01:02")  # on time (2s late, grace 10s)
    scheduler.tick()
    assert _scheduled(queue) == ["00:01:00"]
    # every scheduler down from 00:01:02 to 00:04:30: 00:02, 00:03 and 00:04 were missed
    clock.now = _ms("00:04:30")
    scheduler = Scheduler(queue, [_minutely(policy, **fields)])  # a fresh process
    with caplog.at_level(logging.WARNING, logger="jobcore.cron"):
        scheduler.tick()
    assert _scheduled(queue) == ["00:01:00", *caught_up]
    warned = [
        r.getMessage()
        for r in caplog.records
        if r.name == "jobcore.cron" and "run(s) missed" in r.getMessage()
    ]
    assert warned == (
        []
        if dropped is None
        else [
            f"schedule minutely: {dropped} run(s) missed "
            f"while no scheduler ran were not enqueued (policy {policy})"
        ]
    )
    scheduler.tick()  # nothing more for those times
    clock.now = _ms("00:05:01")
    scheduler.tick()
    scheduler.tick()
    assert _scheduled(queue) == ["00:01:00", *caught_up, "00:05:00"]
    with queue.transaction() as conn:
        store = CronStore(queue.storage)
        runs = store.recent_runs(conn, "minutely")
        state = store.state(conn, "minutely")
    assert [run.scheduled_at for run in runs] == sorted(
        (_ms(at) for at in ["00:01:00", *caught_up, "00:05:00"]), reverse=True
    )
    assert state is not None and state.runs == len(caught_up) + 2
    assert {job.id for job in queue.list_jobs(limit=100)} == {run.job_id for run in runs}


def test_racing_schedulers_enqueue_each_time_once(
    clocked_queue: Callable[..., Queue], clock: Any
) -> None:
    queues = [clocked_queue(clock) for _ in range(6)]  # each its own connections
    schedule = _minutely("all")
    Scheduler(queues[0], [schedule]).tick()
    errors: list[BaseException] = []
    for minute in range(1, 4):
        clock.now = _ms(f"00:0{minute}:00")
        start = threading.Barrier(len(queues))

        def race(
            queue: Queue, start: threading.Barrier = start, errors: list[BaseException] = errors
        ) -> None:
            try:
                scheduler = Scheduler(queue, [schedule])
                scheduler.prepare()
                start.wait()
                scheduler.run_due(schedule)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=race, args=(queue,)) for queue in queues]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert errors == []
    assert _scheduled(queues[0]) == ["00:01:00", "00:02:00", "00:03:00"]


def test_a_stale_compare_and_set_rolls_back_its_jobs(
    clocked_queue: Callable[..., Queue], clock: Any
) -> None:
    queue = clocked_queue(clock)
    schedule = _minutely("all")
    scheduler = Scheduler(queue, [schedule])
    scheduler.tick()
    store = CronStore(queue.storage)
    with queue.transaction() as conn:
        stale = store.state(conn, "minutely")
    assert stale is not None
    clock.now = _ms("00:01:01")
    assert len(scheduler.run_due(schedule)) == 1  # moves the mark
    for state in (stale, None):  # a scheduler that read the old mark; one that read the new
        with pytest.raises(Lost), queue.transaction() as conn:
            current = state or store.state(conn, "minutely")
            assert current is not None
            job = queue.enqueue("noop", {}).job
            # the same scheduled time again: the mark (stale) or the run key (fresh) refuses
            store.advance(conn, current, clock.now, [Run("minutely", _ms("00:01:00"), job.id, 0)])
    assert _scheduled(queue) == ["00:01:00"]
    assert len(queue.list_jobs(limit=10)) == 1


def test_enabled_false_keeps_a_process_from_scheduling(store_db: object, clock: Any) -> None:
    from jobcore_cron import start_scheduler, stop_scheduler

    from jobcore.testing import make_queue

    modules = ["jobcore_cron", *(["jobcore_postgres"] if isinstance(store_db, str) else [])]
    schedules = {"tick": {"type": "noop", "every": "1s"}}
    for enabled, started in ((False, False), (True, True)):
        queue = make_queue(
            str(store_db),
            modules=modules,
            plugin_settings={"cron": {"enabled": enabled, "schedules": schedules}},
        )
        try:
            assert start_scheduler("w", queue) is started
        finally:
            stop_scheduler("w")
            queue.close()


@pytest.mark.parametrize(
    ("day", "expected"),
    [
        # spring forward (02:00 CET -> 03:00 CEST at 01:00Z): the skipped 02:30 runs at 03:00
        ("2026-03-29", {"daily": ["01:00"], "hourly": ["23:30", "00:30", "01:30"]}),
        # fall back (03:00 CEST -> 02:00 CET at 01:00Z): the repeated 02:30 runs once daily,
        # twice hourly
        ("2026-10-25", {"daily": ["00:30"], "hourly": ["23:30", "00:30", "01:30"]}),
    ],
)
def test_paris_dst_changes_with_a_store_and_a_ticking_clock(
    clocked_queue: Callable[..., Queue], clock: Any, day: str, expected: dict[str, list[str]]
) -> None:
    start = int(datetime.fromisoformat(f"{day}T00:00:00+00:00").timestamp() * 1000) - 3_600_000
    clock.now = start - 60_000  # 22:59Z the day before
    queue = clocked_queue(clock)
    paris = {"timezone": "Europe/Paris", "type": "noop", "grace": "20m"}
    schedules = [
        parse_schedule("daily", {**paris, "cron": "30 2 * * *"}, "test"),
        parse_schedule("hourly", {**paris, "cron": "30 * * * *"}, "test"),
    ]
    scheduler = Scheduler(queue, schedules)
    for step in range(19):  # every 10 minutes from 22:59Z to 01:59Z
        clock.now = start - 60_000 + step * 600_000
        scheduler.tick()
    found: dict[str, list[str]] = {"daily": [], "hourly": []}
    for job in sorted(queue.list_jobs(limit=100), key=lambda j: j.meta["cron"]["scheduled_at"]):
        found[job.meta["cron"]["schedule"]].append(job.meta["cron"]["scheduled_at"][11:16])
    assert found == expected


def test_a_store_clock_stepped_back_enqueues_nothing_twice_and_says_so(
    clocked_queue: Callable[..., Queue], clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    queue = clocked_queue(clock)
    scheduler = Scheduler(queue, [_minutely("all")])
    scheduler.tick()
    clock.now = _ms("00:03:01")
    scheduler.tick()
    assert _scheduled(queue) == ["00:01:00", "00:02:00", "00:03:00"]
    clock.now = _ms("00:00:40")  # the clock steps back over times already enqueued
    other = Scheduler(queue, [_minutely("all")])  # a process started after the step
    with caplog.at_level(logging.WARNING, logger="jobcore.cron"):
        other.tick()
        scheduler.tick()
    assert _scheduled(queue) == ["00:01:00", "00:02:00", "00:03:00"]  # none again
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("jobcore.cron") and "clock" in r.getMessage()
    ]
    assert len(warnings) == 1, warnings  # the one that looked: `scheduler` waits for 00:04
    assert "schedule minutely" in warnings[0] and "141s behind" in warnings[0]
    assert "resume after 2026-01-01T00:03:01.000Z" in warnings[0]
    clock.now = _ms("00:04:00")
    other.tick()
    assert _scheduled(queue) == ["00:01:00", "00:02:00", "00:03:00", "00:04:00"]


def test_the_scheduler_thread_outlives_a_locked_database(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    import time

    import apsw

    from jobcore.testing import make_queue

    queue = make_queue(tmp_path / "jobs.db", modules=["jobcore_cron"], busy_timeout=0.2)
    queue.storage.migrate()
    tick = parse_schedule("tick", {"type": "noop", "every": "1s", "grace": "5s"}, "test")
    scheduler = Scheduler(queue, [tick])
    scheduler.prepare()
    writer = apsw.Connection(str(tmp_path / "jobs.db"))
    writer.execute("BEGIN IMMEDIATE")  # another process holds the write lock for a while
    try:
        with caplog.at_level(logging.WARNING, logger="jobcore.cron"):
            scheduler.start()
            time.sleep(0.5)
            assert scheduler._thread is not None and scheduler._thread.is_alive()
        writer.execute("ROLLBACK")
        deadline = time.monotonic() + 20
        while not queue.list_jobs(limit=1) and time.monotonic() < deadline:
            time.sleep(0.1)  # the first pass starts the schedule; a later one enqueues
        enqueued = queue.list_jobs(limit=1)
    finally:
        writer.close()
        scheduler.stop()
        queue.close()
    busy = [
        r
        for r in caplog.records
        if r.name.startswith("jobcore.cron") and "is busy" in r.getMessage()
    ]
    assert busy and "trying again in 1s" in busy[0].getMessage()
    assert busy[0].levelno == logging.WARNING
    assert enqueued  # then it went on


def test_a_mark_moved_back_under_recorded_runs_is_said_and_not_spun_on(
    clocked_queue: Callable[..., Queue], clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    queue = clocked_queue(clock)
    scheduler = Scheduler(queue, [_minutely("all")])
    scheduler.tick()
    clock.now = _ms("00:02:01")
    scheduler.tick()
    assert _scheduled(queue) == ["00:01:00", "00:02:00"]
    with queue.transaction() as conn:  # an operator "rewinds" the schedule by hand
        conn.execute(f"UPDATE {CronStore(queue.storage).schedules} SET last_at = 0")
    clock.now = _ms("00:03:01")  # 00:01 and 00:02 again, with 00:03: the whole pass refuses
    with caplog.at_level(logging.WARNING, logger="jobcore.cron"):
        waits = [scheduler.tick() for _ in range(3)]
    assert _scheduled(queue) == ["00:01:00", "00:02:00"]  # the recorded runs refuse again
    assert waits[-1] >= 1, waits  # not a loop taking the write lock a hundred times a second
    said = [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("jobcore.cron") and "already recorded" in r.getMessage()
    ]
    assert said and "schedule minutely" in said[0]


def test_a_schedule_failing_its_pass_holds_back_no_other(
    clocked_queue: Callable[..., Queue], clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from jobcore import InvalidPayload, JobType, Payload

    ready = [True]

    def available(payload: Any, config: Any) -> None:  # a check of the outside world
        if not ready[0]:
            raise InvalidPayload("the report source is not available")

    queue = clocked_queue(clock)
    report = JobType(name="report", payload_model=Payload, handler=print, check=available)
    queue.registry.register(report, plugin="test")
    fragile = parse_schedule("fragile", {"type": "report", "every": "1m"}, "test")
    steady = parse_schedule("steady", {"type": "noop", "every": "1m"}, "test")
    scheduler = Scheduler(queue, [fragile, steady])
    scheduler.tick()
    ready[0] = False  # the first schedule's job now fails its check at every pass
    clock.now = _ms("00:01:01")
    with caplog.at_level(logging.WARNING, logger="jobcore.cron"):
        wait = scheduler.tick()
    assert [job.type for job in queue.list_jobs(limit=10)] == ["noop"]  # steady ran
    said = [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("jobcore.cron") and "schedule fragile" in r.getMessage()
    ]
    assert said and "the report source is not available" in said[0], caplog.text
    assert 0.5 <= wait <= 30  # the failing one is tried again after a pause, not at once
    ready[0] = True
    clock.now = _ms("00:01:05")
    scheduler.tick()
    assert sorted(job.type for job in queue.list_jobs(limit=10)) == ["noop", "report"]
