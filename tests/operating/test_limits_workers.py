"""Concurrency limits with real worker processes on SQLite and PostgreSQL (DESIGN §16):
handlers tally how many of their group run at once in a file of their own; never more
than the limit run, keys at their limit hold back none of the other keys' jobs, and a
holder killed with SIGKILL gives its slot back with its lease."""

from __future__ import annotations

import json
import signal
import sqlite3
from pathlib import Path
from typing import Any

import worker_fleet
from hubproc import jobcore
from testenv import subprocess_env, wait_for

from jobcore.models import JobStatus
from jobcore.queue import Queue

ENV = {"JOBCORE_PLUGINS": "jobcore_limits_plugin", "JOBCORE_PREFETCH": "4"}


def _cli(db: Path | str, *args: str) -> str:
    return jobcore(db, *args, env=subprocess_env(**ENV)).stdout


PLUGIN = "jobcore_limits_plugin"  # the `queue` fixture's job types (tests/operating/conftest.py)


def _tally(path: Path) -> dict[str, dict[str, int]]:
    if not path.exists():
        return {}
    conn = sqlite3.connect(path, timeout=60)
    try:
        rows = conn.execute("SELECT grp, now, peak, runs FROM running").fetchall()
    except sqlite3.OperationalError:  # no job started yet
        return {}
    finally:
        conn.close()
    return {grp: {"now": now, "peak": peak, "runs": runs} for grp, now, peak, runs in rows}


class Workers(worker_fleet.Workers):
    def __init__(self, db: Path | str, tmp: Path, count: int, *args: str) -> None:
        super().__init__(db, tmp, count, *args, env=ENV)


def _done(queue: Queue, total: int) -> bool:
    return queue.storage.count_by_status().get("completed", 0) >= total


def _payloads(tally: Path, count: int, **fields: Any) -> list[dict[str, Any]]:
    return [{"tally": str(tally), **fields} for _ in range(count)]


def test_a_type_limit_holds_across_four_worker_processes(
    store_db: Path | str, tmp_path: Path, queue: Queue
) -> None:
    tally = tmp_path / "tally.db"
    queue.enqueue_many("limited", _payloads(tally, 40, sleep=0.1))
    queue.enqueue_many("free", _payloads(tally, 40, sleep=0.05))
    workers = Workers(store_db, tmp_path, 4)
    try:
        wait_for(lambda: _done(queue, 80), timeout=120)
    finally:
        workers.stop()
    seen = _tally(tally)
    assert seen["limited"]["runs"] == 40
    # never passed; reached at most: a claimed job may wait in a worker's prefetch (it holds
    # its slot, as claimed) while the others run, so a loaded machine may show 2
    assert 2 <= seen["limited"]["peak"] <= 3
    assert seen["queue:default"]["peak"] > 3  # unlimited work went on beside it


def test_a_queue_limit_set_at_run_time_holds_and_can_be_cleared(
    store_db: Path | str, tmp_path: Path, queue: Queue
) -> None:
    tally = tmp_path / "tally.db"
    _cli(store_db, "limit", "narrow", "--concurrency", "2")
    assert "narrow" in _cli(store_db, "queues")
    queue.enqueue_many("free", _payloads(tally, 24, sleep=0.1), queue="narrow")
    workers = Workers(store_db, tmp_path, 4)
    try:
        wait_for(lambda: _done(queue, 24), timeout=120)
        assert _tally(tally)["queue:narrow"]["peak"] <= 2
        assert json.loads(_cli(store_db, "limit", "narrow", "--clear", "--json"))["cleared"]
        queue.enqueue_many("free", _payloads(tmp_path / "after.db", 24, sleep=0.3), queue="narrow")
        wait_for(lambda: _done(queue, 48), timeout=120)
    finally:
        workers.stop()
    assert _tally(tmp_path / "after.db")["queue:narrow"]["peak"] > 2


def test_a_limit_set_by_another_process_holds_for_running_workers(
    store_db: Path | str, tmp_path: Path, queue: Queue
) -> None:
    """Workers that already looked and saw no limit (PostgreSQL: the NOTIFY of the change
    makes them look again, at once) respect one set at run time from their next claim."""
    tally = tmp_path / "tally.db"
    workers = Workers(store_db, tmp_path, 2)
    try:
        queue.enqueue("free", {"tally": str(tmp_path / "warm.db")}, queue="runtime")
        wait_for(lambda: _done(queue, 1), timeout=60)  # both running, idle, no limit seen
        _cli(store_db, "limit", "runtime", "--concurrency", "2")
        queue.enqueue_many("free", _payloads(tally, 16, sleep=0.2), queue="runtime")
        wait_for(lambda: _done(queue, 17), timeout=120)
    finally:
        workers.stop()
    seen = _tally(tally)["queue:runtime"]
    assert seen["runs"] == 16 and seen["peak"] <= 2


def test_a_key_limit_holds_per_key_and_blocks_no_other_key(
    store_db: Path | str, tmp_path: Path, queue: Queue
) -> None:
    tally = tmp_path / "tally.db"
    # one customer's backlog first in claim order, then twenty others behind it
    big = queue.enqueue_many("per_customer", _payloads(tally, 60, sleep=0.05, customer="big"))
    others = [
        job
        for n in range(20)
        for job in queue.enqueue_many(
            "per_customer", _payloads(tally, 3, sleep=0.05, customer=f"c{n}")
        )
    ]
    workers = Workers(store_db, tmp_path, 4)
    try:
        ids = [made.job.id for made in others]
        wait_for(lambda: all(queue.get(i).status == JobStatus.COMPLETED for i in ids), 120)
        pending_big = sum(queue.get(made.job.id).status == JobStatus.PENDING for made in big)
        assert pending_big > 20, "the other customers' jobs waited behind the big backlog"
        wait_for(lambda: _done(queue, 120), timeout=120)
    finally:
        workers.stop()
    seen = _tally(tally)
    assert seen["customer:big"] == {"now": 0, "peak": 1, "runs": 60}
    assert all(seen[f"customer:c{n}"]["peak"] == 1 for n in range(20))
    assert seen["per_customer"]["peak"] > 1  # different keys ran at once


def test_a_killed_holder_gives_its_slot_back_with_its_lease(
    store_db: Path | str, tmp_path: Path, queue: Queue
) -> None:
    tally = tmp_path / "tally.db"
    started = tmp_path / "started"
    _cli(store_db, "limit", "--type", "free", "--concurrency", "1")
    held = queue.enqueue(
        "free", {"tally": str(tally), "sleep": 60, "touch": str(started)}, max_attempts=1
    ).job
    holder = Workers(store_db, tmp_path, 1, "--lease", "2s")
    try:
        wait_for(started.exists, timeout=60)
        waiting = queue.enqueue("free", {"tally": str(tally)}).job
        holder.procs[0].send_signal(signal.SIGKILL)
        holder.procs[0].wait()
        killed_at = queue.storage.now()
        other = Workers(store_db, tmp_path, 1, "--lease", "2s")
        try:
            wait_for(lambda: queue.get(waiting.id).status == JobStatus.COMPLETED, timeout=60)
        finally:
            other.stop()
    finally:
        holder.stop()
    assert queue.get(held.id).status == JobStatus.FAILED  # its lease ran out: swept
    claimed_at = queue.get(waiting.id).claimed_at
    assert claimed_at is not None
    lease_end = queue.get(held.id).claimed_at  # the held job's claim, plus its 2 s lease
    assert lease_end is not None and claimed_at >= lease_end + 2000
    assert claimed_at >= killed_at


def test_until_empty_waits_for_a_slot_another_worker_holds(
    store_db: Path | str, tmp_path: Path, queue: Queue
) -> None:
    # one slot for the queue; a worker of another type holds it when an `--until-empty`
    # worker of `free` first looks: its jobs wait for the slot, they are not "nothing
    # runnable" (it used to exit with them pending: no other worker claims that type)
    tally, started = tmp_path / "tally.db", tmp_path / "started"
    _cli(store_db, "limit", "shared", "--concurrency", "1")
    payload = {"tally": str(tally), "sleep": 3, "touch": str(started)}
    queue.enqueue("limited", payload, queue="shared")
    frees = queue.enqueue_many("free", _payloads(tally, 3, sleep=0.1), queue="shared")
    holder = Workers(store_db, tmp_path, 1, "--type", "limited")
    try:
        wait_for(started.exists, timeout=60)
        (tmp_path / "drainer").mkdir()
        drainer = Workers(store_db, tmp_path / "drainer", 1, "--type", "free", "--until-empty")
        try:
            assert drainer.procs[0].wait(timeout=120) == 0
        finally:
            drainer.stop()
    finally:
        holder.stop()
    assert {queue.get(made.job.id).status for made in frees} == {JobStatus.COMPLETED}


def test_draining_workers_of_different_types_and_queues_share_a_limit_and_all_exit(
    store_db: Path | str, tmp_path: Path, queue: Queue
) -> None:
    # four `--until-empty` workers with different --type/--queue filters race for a queue
    # limit of 2; a paused queue with its own limit holds jobs none of them may run: every
    # runnable job completes, every worker exits 0, the paused jobs stay pending
    tally = tmp_path / "tally.db"
    _cli(store_db, "limit", "shared", "--concurrency", "2")
    _cli(store_db, "limit", "held", "--concurrency", "1")
    _cli(store_db, "pause", "held")
    made = queue.enqueue_many("limited", _payloads(tally, 6, sleep=0.3), queue="shared")
    made += queue.enqueue_many("free", _payloads(tally, 6, sleep=0.3), queue="shared")
    made += queue.enqueue_many("free", _payloads(tally, 5, sleep=0.1), queue="other")
    held = queue.enqueue_many("free", _payloads(tally, 3), queue="held")
    filters = [
        ("--type", "limited"),
        ("--type", "free", "--queue", "shared"),
        ("--queue", "other"),
        ("--type", "free"),
    ]
    fleets = []
    for n, args in enumerate(filters):
        (tmp_path / f"w{n}").mkdir()
        fleets.append(Workers(store_db, tmp_path / f"w{n}", 1, *args, "--until-empty"))
    try:
        assert [fleet.procs[0].wait(timeout=120) for fleet in fleets] == [0] * 4
    finally:
        for fleet in fleets:
            fleet.stop()
    assert {queue.get(m.job.id).status for m in made} == {JobStatus.COMPLETED}
    assert {queue.get(m.job.id).status for m in held} == {JobStatus.PENDING}
    seen = _tally(tally)
    assert seen["queue:shared"]["peak"] <= 2 and seen["limited"]["peak"] <= 2
