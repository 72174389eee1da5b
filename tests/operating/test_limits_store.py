"""Concurrency limits in the store (DESIGN §16), on SQLite and PostgreSQL: claims take
only what fits, every way out of `claimed` frees the slot, a key at its limit holds back
none of the other keys, run-time limits win over declared ones; values are checked."""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jobcore import operating
from jobcore.concurrency import MAX_KEY, checked_concurrency, checked_limit, key_of
from jobcore.declare import JobTypeDeclarationError, job_type
from jobcore.errors import InvalidPayload, JobcoreError
from jobcore.models import Cancelled, Completed, Failed, Job, Lease, Released, Retrying
from jobcore.queue import Queue
from jobcore.registry import JobType, JobTypeRegistry, Payload
from jobcore.testing import make_queue

PLUGIN = "jobcore_limits_plugin"  # the `queue` fixture's job types (tests/operating/conftest.py)
DECLARED = ["limited", "per_customer", "free"]


def _claim(queue: Queue, limit: int = 100, **filters: Any) -> list[Job]:
    return queue.storage.claim(worker="w", limit=limit, lease_ms=60_000, **filters)


def _enqueue(into: Queue, type_: str, count: int, **payload: Any) -> None:
    options = {k: payload.pop(k) for k in ("queue", "priority") if k in payload}
    into.enqueue_many(type_, [{"tally": "-", **payload}] * count, **options)


def _lease(job: Job) -> Lease:
    assert job.lease_id is not None
    return Lease(job.id, job.lease_id, "w", job)


OUTCOMES: dict[str, Callable[[Lease], Any]] = {
    "completed": lambda lease: Completed(lease, None),
    "failed": lambda lease: Failed(lease, "boom"),
    "retried": lambda lease: Retrying(lease, "again", 0),
    "released": lambda lease: Released(lease),
    "cancelled": lambda lease: Cancelled(lease),
}


@pytest.mark.parametrize("outcome", sorted(OUTCOMES))
def test_every_way_out_of_claimed_frees_the_slot(queue: Queue, outcome: str) -> None:
    operating.set_limit(queue, "type", "free", 1)
    _enqueue(queue, "free", 3)
    (held,) = _claim(queue)
    assert _claim(queue) == []  # at its limit: the others stay pending
    queue.storage.commit_batch(
        [OUTCOMES[outcome](_lease(held))], worker="w", claim_limit=0, lease_ms=60_000
    )
    assert len(_claim(queue)) == 1


def test_the_lease_sweep_frees_a_dead_holders_slot(queue: Queue) -> None:
    operating.set_limit(queue, "type", "free", 1)
    _enqueue(queue, "free", 2)
    assert len(queue.storage.claim(worker="dead", limit=5, lease_ms=50)) == 1
    assert _claim(queue) == []
    time.sleep(0.2)
    assert _claim(queue) == []  # an expired lease still holds the slot until swept
    queue.storage.sweep(force=True)
    assert len(_claim(queue)) == 1


def test_declared_limits_hold_for_claimers_without_the_type(
    queue: Queue, store_db: Path | str
) -> None:
    bare = make_queue(store_db, modules=["jobcore_postgres"] if isinstance(store_db, str) else [])
    try:
        _enqueue(queue, "limited", 10)
        assert len(bare.storage.claim(worker="x", limit=100, lease_ms=60_000)) == 3
        assert bare.storage.claim(worker="x", limit=100, lease_ms=60_000) == []
    finally:
        bare.close()


def test_a_full_key_holds_back_no_other_key_nor_other_work(queue: Queue) -> None:
    _enqueue(queue, "per_customer", 300, customer="big", priority=5)
    for n in range(5):
        _enqueue(queue, "per_customer", 2, customer=f"c{n}")
    _enqueue(queue, "free", 4, priority=-1)
    got = Counter((j.type, j.payload["customer"]) for j in _claim(queue, 20))
    assert got == Counter(
        {("per_customer", "big"): 1, ("free", ""): 4}
        | {("per_customer", f"c{n}"): 1 for n in range(5)}
    )
    # the next claims find nothing of the full keys, whatever their backlog
    assert _claim(queue, 20) == []
    rows = {r["name"]: r for r in operating.limit_rows(queue)}
    assert rows["per_customer"]["held"] == 6  # keys at their limit


def test_keys_past_a_full_one_take_turns(queue: Queue) -> None:
    _enqueue(queue, "per_customer", 200, customer="big", priority=5)
    for n in range(30):
        _enqueue(queue, "per_customer", 3, customer=f"k{n:02}")
    (first,) = _claim(queue, 1)
    assert first.payload["customer"] == "big"  # claim order, and it stays claimed
    taken: list[str] = []
    for _ in range(40):  # one at a time, each finished at once
        for job in _claim(queue, 1):
            taken.append(job.payload["customer"])
            queue.storage.commit_batch(
                [Completed(_lease(job), None)], worker="w", claim_limit=0, lease_ms=60_000
            )
    # past the full key's backlog, every other key before any comes round again
    assert len(taken) == 40 and "big" not in taken
    assert len(set(taken[:30])) == 30


def test_a_queue_limit_and_a_queue_filter(queue: Queue) -> None:
    operating.set_limit(queue, "queue", "narrow", 2)
    _enqueue(queue, "free", 5, queue="narrow")
    _enqueue(queue, "free", 5, queue="wide")
    assert len(_claim(queue, queues=["narrow"])) == 2
    assert _claim(queue, queues=["narrow"]) == []
    assert len(_claim(queue, queues=["narrow", "wide"])) == 5


def test_a_type_limit_fills_to_its_room_then_other_types_fill_the_claim(queue: Queue) -> None:
    _enqueue(queue, "limited", 10, priority=9)
    _enqueue(queue, "free", 10)
    got = Counter(j.type for j in _claim(queue, 8))
    assert got == Counter({"limited": 3, "free": 5})


def test_paused_and_limited_together(queue: Queue) -> None:
    _enqueue(queue, "limited", 5)
    _enqueue(queue, "free", 5)
    operating.pause(queue, "type", "free")
    assert Counter(j.type for j in _claim(queue)) == Counter({"limited": 3})


def test_set_wins_over_declared_until_cleared(queue: Queue) -> None:
    operating.set_limit(queue, "type", "limited", 5)
    operating.declare_types(queue, ["limited"])  # a worker starting: the set limit stays
    (limit,) = [lim for lim in queue.storage.limits() if lim.name == "limited"]
    assert (limit.concurrency, limit.source) == (5, "set")
    assert operating.clear_limit(queue, "type", "limited") is not None
    assert operating.clear_limit(queue, "type", "limited") is None
    operating.declare_types(queue, ["limited"])
    (limit,) = [lim for lim in queue.storage.limits() if lim.name == "limited"]
    assert (limit.concurrency, limit.source) == (3, "declared")


def test_a_type_that_declares_no_limit_any_more_loses_its_declared_one(queue: Queue) -> None:
    queue.storage.declare_limits([], ["limited"])
    assert [lim.name for lim in queue.storage.limits()] == ["per_customer"]


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "3", math.inf, math.nan, 10**7, None, 2**70])
def test_bad_concurrency_is_refused(bad: Any) -> None:
    with pytest.raises(InvalidPayload, match="concurrency"):
        checked_concurrency(bad)


def test_bad_limits_are_refused_and_change_nothing(queue: Queue) -> None:
    for scope, name, value in [
        ("queue", "q", 0),
        ("shelf", "q", 1),
        ("queue", "", 1),
        ("queue", "x" * 201, 1),
        ("type", "a\nb", 1),
    ]:
        with pytest.raises(InvalidPayload):
            operating.set_limit(queue, scope, name, value)
    assert {lim.name for lim in queue.storage.limits()} == {"limited", "per_customer"}
    assert checked_limit("key", "t", 2.0).concurrency == 2


class _Keyed(Payload):
    customer: str | None = None
    n: int = 0


def test_bad_declarations_are_refused() -> None:
    with pytest.raises(JobTypeDeclarationError, match="concurrency_key needs concurrency"):
        job_type("t1", concurrency_key="customer")
    with pytest.raises(JobTypeDeclarationError, match="from 1"):
        job_type("t2", concurrency=0)
    registry = JobTypeRegistry()
    with pytest.raises(JobcoreError, match="not a field"):
        registry.register(
            JobType(
                name="t3",
                payload_model=_Keyed,
                handler=lambda p, c: None,
                concurrency=1,
                concurrency_key="customr",
            ),
            plugin="p",
        )


def test_keys_from_a_field_or_a_callable() -> None:
    assert key_of("t", "customer", _Keyed(customer="acme")) == "acme"
    assert key_of("t", "customer", _Keyed()) is None  # no key: only type/queue limits
    assert key_of("t", lambda p: p.n % 3, _Keyed(n=7)) == "1"
    with pytest.raises(InvalidPayload, match="at most"):
        key_of("t", "customer", _Keyed(customer="x" * (MAX_KEY + 1)))
    with pytest.raises(InvalidPayload, match="text or a whole number"):
        key_of("t", lambda p: [1], _Keyed())


def test_a_pending_job_waits_for_a_slot_unless_paused_or_not_the_workers(queue: Queue) -> None:
    # what keeps a worker draining `--until-empty` from calling the queue empty (§16)
    _enqueue(queue, "limited", 1, queue="q")
    assert operating.waits_for_a_slot(queue, (), ())
    assert operating.waits_for_a_slot(queue, ("q",), ("limited",))
    assert not operating.waits_for_a_slot(queue, ("other",), ())
    assert not operating.waits_for_a_slot(queue, (), ("free",))
    operating.pause(queue, "queue", "q")
    assert not operating.waits_for_a_slot(queue, (), ())  # paused: not runnable at all
    operating.resume(queue, "queue", "q")
    operating.pause(queue, "type", "limited")
    assert not operating.waits_for_a_slot(queue, (), ())
    operating.resume(queue, "type", "limited")
    operating.declare_limits(queue, [], ["limited", "per_customer", "free"])
    assert queue.storage.limits() == []
    assert not operating.waits_for_a_slot(queue, (), ())  # no limit: nothing holds it back


def test_a_waiting_job_is_found_behind_many_newer_paused_ones(queue: Queue) -> None:
    # the look for held-back jobs read the newest 100 pending and dropped the paused ones:
    # 100 newer paused jobs hid the one that waits for a slot, and `--until-empty` exited
    _enqueue(queue, "limited", 1)
    _enqueue(queue, "free", 101, queue="stopped")
    operating.pause(queue, "queue", "stopped")
    operating.set_limit(queue, "queue", "stopped", 1)
    assert operating.waits_for_a_slot(queue, (), ())
    _enqueue(queue, "per_customer", 1, customer="c", queue="keyed")
    _enqueue(queue, "per_customer", 101, customer="c", queue="keyed_stopped")
    operating.pause(queue, "queue", "keyed_stopped")
    assert operating.waits_for_a_slot(queue, ("keyed", "keyed_stopped"), ("per_customer",))
    assert operating.waits_for_a_slot(queue, (), ("per_customer",))
    operating.pause(queue, "queue", "keyed")
    assert not operating.waits_for_a_slot(queue, (), ("per_customer",))


def test_only_a_limit_over_the_job_keeps_it_waiting(queue: Queue) -> None:
    # a limit on a queue or type the job is not in frees no slot for it: a job held back
    # by a rate alone (or enqueued after the last claim) is not waited for, limit or none
    operating.declare_limits(queue, [], ["per_customer", "free"])  # `limited` keeps its 3
    operating.set_limit(queue, "queue", "elsewhere", 1)
    _enqueue(queue, "free", 1)
    assert not operating.waits_for_a_slot(queue, (), ())
    assert not operating.waits_for_a_slot(queue, ("default",), ("free",))
    _enqueue(queue, "free", 1, queue="elsewhere")
    assert operating.waits_for_a_slot(queue, (), ())
    assert not operating.waits_for_a_slot(queue, ("default",), ())  # not its queue
    _enqueue(queue, "limited", 1)
    assert operating.waits_for_a_slot(queue, ("default",), ())
    assert not operating.waits_for_a_slot(queue, ("default",), ("free",))  # not its type


def test_a_draining_worker_looks_for_held_back_jobs_once_a_poll_interval(queue: Queue) -> None:
    # every wake (any commit on the store) looked again: limits, pauses and a scan of the
    # pending jobs, tens of times a second beside a busy worker; a "waits" answer now stands
    # for a poll interval, a "nothing waits" one is never kept (the worker exits on it)
    _enqueue(queue, "limited", 1)
    reads: list[str] = []
    limits = queue.storage.limits
    queue.storage.limits = lambda: reads.append("limits") or limits()  # type: ignore[method-assign]
    look = operating.SlotLook(queue, (), ("limited",), poll_interval=1.0)
    assert all(look.waits(100.0 + n / 100) for n in range(50))
    assert reads == ["limits"]
    operating.pause(queue, "type", "limited")
    assert look.waits(100.9)  # still the answer of 100.0
    assert not look.waits(101.0)
    assert not look.waits(101.01)
    assert reads == ["limits"] * 3
