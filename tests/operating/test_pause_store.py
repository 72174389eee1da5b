"""Pauses in the claim itself (DESIGN §16), on SQLite and PostgreSQL: paused work is never
claimed by any claim that starts after the pause commits, on any connection; enqueue works."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from jobcore import operating
from jobcore.cli.admin import stats_json
from jobcore.errors import InvalidPayload
from jobcore.queue import Queue

LEASE = 60_000


def _fill(queue: Queue) -> dict[str, str]:
    """One noop job in each of the queues hot, cold and mail: {queue: job id}."""
    return {name: queue.enqueue("noop", {}, queue=name).job.id for name in ("hot", "cold", "mail")}


def _claim(queue: Queue, **filters: list[str]) -> set[str]:
    jobs = queue.storage.claim(worker="w1", limit=50, lease_ms=LEASE, **filters)
    return {job.queue for job in jobs}


def test_a_paused_queue_is_skipped_by_every_claim_on_every_connection(
    queue_on: Callable[..., Queue],
) -> None:
    admin, worker = queue_on(), queue_on()  # two handles: the pause is read from the store
    operating.pause(admin, "queue", "hot", reason="upstream down", by="ops")
    _fill(admin)
    assert _claim(worker, queues=["hot"]) == set()  # a claimer of the paused queue alone
    assert _claim(worker, queues=["hot", "cold"]) == {"cold"}  # several queues
    assert _claim(worker, types=["noop"]) == {"mail"}  # a type filter still skips it
    _fill(admin)
    assert _claim(worker) == {"cold", "mail"}  # unfiltered
    pending = admin.list_jobs(statuses=["pending"])
    assert {job.queue for job in pending} == {"hot"} and len(pending) == 2  # enqueue works
    operating.resume(admin, "queue", "hot")
    assert _claim(worker) == {"hot"}
    assert admin.list_jobs(statuses=["pending"]) == []


def test_a_paused_type_is_skipped_in_every_queue(queue_on: Callable[..., Queue]) -> None:
    queue = queue_on()
    operating.pause(queue, "type", "noop", by="ops")
    _fill(queue)
    assert _claim(queue) == set()
    assert _claim(queue, queues=["hot", "cold"]) == set()
    assert _claim(queue, types=["noop"]) == set()
    # the group-commit path (workers) reads the pauses too
    recorded, claimed = queue.storage.commit_batch([], worker="w1", claim_limit=10, lease_ms=LEASE)
    assert recorded == [] and claimed == []
    operating.resume(queue, "type", "noop")
    _, claimed = queue.storage.commit_batch([], worker="w1", claim_limit=10, lease_ms=LEASE)
    assert {job.queue for job in claimed} == {"hot", "cold", "mail"}


def test_pausing_twice_keeps_the_first_pause_and_resume_says_what_it_did(
    queue_on: Callable[..., Queue],
) -> None:
    queue = queue_on()
    first, created = operating.pause(queue, "queue", "hot", reason="first", by="ann")
    again, created_again = operating.pause(queue, "queue", "hot", reason="second", by="bob")
    assert created and not created_again
    assert again == first and first.reason == "first" and first.by == "ann"
    assert abs(first.since - queue.storage.now()) < 60_000
    assert operating.resume(queue, "queue", "hot") == first
    assert operating.resume(queue, "queue", "hot") is None
    assert queue.storage.pauses() == []


def test_queues_and_stats_show_depth_and_pauses(queue_on: Callable[..., Queue]) -> None:
    queue = queue_on()
    _fill(queue)
    queue.enqueue("noop", {}, queue="hot", delay=3600)
    operating.pause(queue, "queue", "hot", reason="maintenance\nwindow", by="ops")
    operating.pause(queue, "queue", "empty", by="ops")
    operating.pause(queue, "type", "shell", by="ops")
    rows = {row["queue"]: row for row in operating.queue_rows(queue)}
    assert rows["hot"]["pending"] == 1 and rows["hot"]["scheduled"] == 1
    assert rows["hot"]["paused"] and rows["hot"]["reason"] == "maintenance window"
    assert rows["empty"]["paused"] and rows["empty"]["pending"] == 0  # a pause with no jobs
    assert not rows["cold"]["paused"] and rows["cold"]["by"] is None
    paused = stats_json(queue.stats())["paused"]
    assert [(p["kind"], p["name"]) for p in paused] == [
        ("queue", "empty"),
        ("queue", "hot"),
        ("type", "shell"),
    ]
    assert paused[1]["since"].endswith("Z") and paused[1]["by"] == "ops"


@pytest.mark.parametrize(
    ("kind", "name", "problem"),
    [
        ("queue", "", "empty"),
        ("queue", "   ", "empty"),
        ("queue", "a\x00b", "control characters"),
        ("type", "x" * 201, "at most 200"),
        ("queue", "\ud800", "control characters"),
        ("shelf", "hot", "'queue' or 'type'"),
    ],
)
def test_a_bad_name_is_refused_and_nothing_is_written(
    queue_on: Callable[..., Queue], kind: str, name: str, problem: str
) -> None:
    queue = queue_on()
    with pytest.raises(InvalidPayload, match=problem):
        operating.pause(queue, kind, name)
    with pytest.raises(InvalidPayload, match=problem):
        operating.resume(queue, kind, name)
    assert queue.storage.pauses() == []


def test_a_bad_reason_is_refused(queue_on: Callable[..., Queue]) -> None:
    queue = queue_on()
    with pytest.raises(InvalidPayload, match="reason has control characters"):
        operating.pause(queue, "queue", "hot", reason="a\x00b")
    with pytest.raises(InvalidPayload, match=r"lone surrogate|control"):
        operating.pause(queue, "queue", "hot", reason="\udcff")
    assert queue.storage.pauses() == []
    made, _ = operating.pause(queue, "queue", "hot", reason="r" * 2000)
    assert len(made.reason) == 500  # clamped


@pytest.mark.parametrize("filters", [{}, {"types": ["noop"]}, {"types": ["noop", "shell"]}])
def test_claims_past_a_paused_queue_keep_claim_order(
    queue_on: Callable[..., Queue], filters: dict[str, list[str]]
) -> None:
    """A claim past a paused queue walks the other queues by name: still highest
    priority first, then oldest, across them all; and what it claims is all there is."""
    queue = queue_on()
    queue.enqueue_many("noop", [{}] * 5, queue="paused", priority=9)
    low = queue.enqueue("noop", {}, queue="b", priority=1).job.id
    high = queue.enqueue("noop", {}, queue="c", priority=5).job.id
    old = queue.enqueue("noop", {}, queue="d", priority=1).job.id
    newer = queue.enqueue("noop", {}, queue="b", priority=1).job.id
    operating.pause(queue, "queue", "paused")
    order = []
    for _ in range(5):
        order += [j.id for j in queue.storage.claim(worker="w", limit=1, lease_ms=LEASE, **filters)]
    assert order == [high, low, old, newer]


def test_many_queues_and_a_paused_one(queue_on: Callable[..., Queue]) -> None:
    """More queues with pending jobs than a claim names one by one (SQLite: 64)."""
    queue = queue_on()
    for number in range(80):
        queue.enqueue("noop", {}, queue=f"q{number:02}")
    operating.pause(queue, "queue", "q07")
    operating.pause(queue, "type", "shell")
    claimed = queue.storage.claim(worker="w", limit=100, lease_ms=LEASE)
    assert len(claimed) == 79 and "q07" not in {job.queue for job in claimed}


def test_a_claim_of_some_types_finds_its_job_behind_other_types_past_a_pause(
    queue_on: Callable[..., Queue],
) -> None:
    """Past a paused queue a claimer of some types reads the head of each other queue;
    its job behind many rows of other types (which it must not claim) is still found."""
    queue = queue_on(allow_unregistered_types=True)  # `mine`: a type some agent runs
    queue.enqueue_many("mine", [{}] * 3, queue="paused", priority=9)
    queue.enqueue_many("noop", [{}] * 300, queue="busy", priority=5)  # not this claimer's
    wanted = queue.enqueue("mine", {}, queue="busy", priority=1).job.id
    operating.pause(queue, "queue", "paused")
    claimed = queue.storage.claim(worker="w", limit=2, lease_ms=LEASE, types=["mine"])
    assert [job.id for job in claimed] == [wanted]
    assert queue.storage.claim(worker="w", limit=2, lease_ms=LEASE, types=["mine"]) == []
