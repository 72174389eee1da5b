"""Rate limits under review (DESIGN §16), on SQLite and PostgreSQL: a claim larger than
the room left takes only the room, a queue rate and a type rate both hold, keys that
appear mid-window get their own room, a rate and a concurrency limit on one type or key
take the tighter, and a push after the rate was cleared holds nothing."""

from __future__ import annotations

from collections import Counter
from typing import Any

from jobcore import operating
from jobcore.models import Job
from jobcore.queue import Queue
from jobcore.rates import checked_period, parse_rate

TYPES = ["rated", "rated_key", "pushy", "unrated"]


PLUGIN = "jobcore_rates_plugin"  # the `queue` fixture's job types (tests/operating/conftest.py)
DECLARED = TYPES


def _claim(queue: Queue, limit: int = 500, **filters: Any) -> list[Job]:
    return queue.storage.claim(worker="w", limit=limit, lease_ms=60_000, **filters)


def test_batch_larger_than_room(queue: Queue) -> None:
    operating.set_rate(queue, "type", "unrated", 5, 60)
    queue.enqueue_many("unrated", [{}] * 20)
    assert len(_claim(queue, limit=2)) == 2
    assert len(_claim(queue, limit=100)) == 3
    assert _claim(queue, limit=100) == []


def test_queue_and_type_rates_both_hold(queue: Queue) -> None:
    operating.set_rate(queue, "queue", "api", 4, 60)
    operating.set_rate(queue, "type", "unrated", 2, 60)
    queue.enqueue_many("unrated", [{}] * 5, queue="api")
    queue.enqueue_many("rated", [{}] * 5, queue="api")
    got = _claim(queue)
    c = Counter(j.type for j in got)
    assert c["unrated"] == 2 and sum(c.values()) == 4, c
    assert _claim(queue) == []


def test_keys_appearing_mid_window(queue: Queue) -> None:
    queue.enqueue_many("rated_key", [{"customer": "a"}] * 5)
    assert len(_claim(queue)) == 2
    queue.enqueue_many("rated_key", [{"customer": "b"}] * 5)
    got = _claim(queue)
    assert [j.payload["customer"] for j in got] == ["b", "b"]


def test_rate_and_concurrency_same_type(queue: Queue) -> None:
    operating.set_limit(queue, "type", "rated", 3)
    queue.enqueue_many("rated", [{}] * 20)
    assert len(_claim(queue)) == 3


def test_key_rate_and_key_concurrency(queue: Queue) -> None:
    operating.set_limit(queue, "key", "rated_key", 1)
    queue.enqueue_many("rated_key", [{"customer": "a"}] * 5 + [{"customer": "b"}] * 5)
    got = _claim(queue)
    assert sorted(j.payload["customer"] for j in got) == ["a", "b"]


def test_a_push_after_the_rate_was_cleared_holds_nothing(queue: Queue) -> None:
    job = queue.enqueue("pushy", {}).job
    operating.clear_rate(queue, "type", "pushy")
    assert not queue.storage.push_rate(job.id, 30)
    assert len(_claim(queue)) == 1


def test_a_period_between_milliseconds_is_rounded_up_never_down() -> None:
    """`1/2.5ms` must not become `1/2ms` (25 % more starts than asked)."""
    assert parse_rate("5/2.5ms") == (5, 3)
    assert parse_rate("1/1.4ms") == (1, 2)
    assert parse_rate("1/0.0001s") == (1, 1)  # the shortest period there is
    assert parse_rate("7/0.3s") == (7, 300)  # 0.3 * 1000 is 300.00000000000006
    assert parse_rate("1/1d") == (1, 86_400_000)
    assert checked_period(1.0004) == 1001
    assert checked_period(0.5) == 500
