"""Rate limits in the store (DESIGN §16), on SQLite and PostgreSQL: claims take at most N
per sliding period per queue, type or key, a full limit holds back nothing else, the
next claim's time is known, `RetryAfter(..., limit=True)` pushes a window out, and bad
values change nothing."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import pytest

from jobcore import operating
from jobcore.declare import JobTypeDeclarationError, job_type
from jobcore.errors import InvalidPayload, JobcoreError, RetryAfter
from jobcore.models import Completed, Job, Lease
from jobcore.queue import Queue
from jobcore.rates import (
    MAX_PUSH_SECONDS,
    Window,
    format_period,
    parse_rate,
    push_seconds,
)
from jobcore.registry import JobType, JobTypeRegistry, Payload

TYPES = ["rated", "rated_key", "pushy", "unrated"]


PLUGIN = "jobcore_rates_plugin"  # the `queue` fixture's job types (tests/operating/conftest.py)
DECLARED = TYPES


def _claim(queue: Queue, limit: int = 500, **filters: Any) -> list[Job]:
    return queue.storage.claim(worker="w", limit=limit, lease_ms=60_000, **filters)


def _rows(queue: Queue) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["scope"], r["name"]): r for r in operating.limit_rows(queue) if r["rate"]}


def test_a_type_rate_claims_at_most_n_in_the_window_and_knows_when_it_opens(
    queue: Queue,
) -> None:
    queue.enqueue_many("rated", [{}] * 25)
    queue.enqueue_many("unrated", [{}] * 5)
    before = queue.storage.now()
    first = _claim(queue)
    assert Counter(job.type for job in first) == {"rated": 10, "unrated": 5}
    assert _claim(queue) == []  # full: nothing more of it, the others all taken
    assert _rows(queue)[("type", "rated")]["used"] == 10
    opens = queue.storage.next_due()  # an idle claimer waits for this, not for a poll
    assert opens is not None and before + 1000 <= opens <= queue.storage.now() + 1000
    queue.enqueue("unrated", {})
    assert [job.type for job in _claim(queue)] == ["unrated"]  # no head-of-line blocking


def test_starts_counted_stay_counted_after_the_jobs_finish(queue: Queue) -> None:
    """A rate counts starts, not running jobs: completing frees nothing."""
    queue.enqueue_many("rated", [{}] * 12)
    jobs = _claim(queue)
    assert len(jobs) == 10
    leases = [Lease(job.id, job.lease_id or "", "w", job) for job in jobs]
    queue.storage.record([Completed(lease, None) for lease in leases])
    assert _claim(queue) == []


def test_a_key_rate_holds_per_key_and_starves_no_key(queue: Queue) -> None:
    customers = [f"c{n:03d}" for n in range(60)]
    queue.enqueue_many("rated_key", [{"customer": c} for c in customers for _ in range(4)])
    taken: Counter[str] = Counter()
    for _ in range(40):  # small claims, as a busy worker makes them
        got = _claim(queue, limit=7)
        if not got:
            break
        taken.update(job.payload["customer"] for job in got)
    assert taken == {c: 2 for c in customers}  # every key served, none past its rate
    assert _rows(queue)[("key", "rated_key")]["used"] == 60  # keys at their rate


def test_a_queue_rate_with_a_concurrency_limit_takes_the_tighter(queue: Queue) -> None:
    operating.set_rate(queue, "queue", "api", 5, 60)
    operating.set_limit(queue, "queue", "api", 3)
    queue.enqueue_many("unrated", [{}] * 10, queue="api")
    jobs = _claim(queue)
    assert len(jobs) == 3
    leases = [Lease(job.id, job.lease_id or "", "w", job) for job in jobs]
    queue.storage.record([Completed(lease, None) for lease in leases])
    assert len(_claim(queue)) == 2  # the rate's 5 now binds
    assert _claim(queue) == []
    operating.clear_rate(queue, "queue", "api")
    assert len(_claim(queue)) == 1  # the 2 claimed hold 2 of the concurrency's 3


def test_set_wins_over_declared_and_clearing_brings_the_declared_back(queue: Queue) -> None:
    made = operating.set_rate(queue, "type", "rated", 3, 0.5)
    assert (made.rate, made.period_ms, made.source) == (3, 500, "set")
    operating.declare_types(queue, TYPES)  # a worker starting: the set one stays
    assert _rows(queue)[("type", "rated")]["rate"] == 3
    assert operating.clear_rate(queue, "type", "rated") is not None
    assert operating.clear_rate(queue, "type", "rated") is None
    operating.declare_types(queue, TYPES)
    row = _rows(queue)[("type", "rated")]
    assert (row["rate"], row["period"], row["source"]) == (10, 1.0, "declared")


def test_a_push_holds_the_narrowest_limit_back_until_then(queue: Queue) -> None:
    pushy = queue.enqueue_many("pushy", [{}] * 3)
    keyed = queue.enqueue_many("rated_key", [{"customer": "a"}, {"customer": "b"}])
    free = queue.enqueue("unrated", {})
    now = queue.storage.now()
    assert queue.storage.push_rate(pushy[0].job.id, 30)
    assert queue.storage.push_rate(keyed[0].job.id, 30)  # key a only
    assert not queue.storage.push_rate(free.job.id, 30)  # no rate: no push
    assert not queue.storage.push_rate("no-such-job", 30)
    assert [job.type for job in _claim(queue, types=["unrated"])] == ["unrated"]
    got = _claim(queue)
    assert [job.payload.get("customer") for job in got] == ["b"]
    due = queue.storage.next_due()
    assert due is not None and now + 29_000 <= due <= queue.storage.now() + 30_000


def test_push_values_are_clamped() -> None:
    assert push_seconds(math.inf) == MAX_PUSH_SECONDS
    assert push_seconds(1e300) == MAX_PUSH_SECONDS
    assert push_seconds(math.nan) == 0 and push_seconds(-5) == 0 and push_seconds("x") == 0
    assert push_seconds(2.5) == 2.5
    assert RetryAfter(3, limit=True).limit and not RetryAfter(3).limit
    with pytest.raises(ValueError):
        RetryAfter(math.nan, limit=True)


def test_bad_values_are_refused_and_change_nothing(queue: Queue) -> None:
    before = operating.limit_rows(queue)
    for rate, period in [
        (0, 1),
        (-1, 1),
        (10**7, 1),
        (1.5, 1),
        ("5", 1),
        (True, 1),
        (5, 0),
        (5, -1),
        (5, math.inf),
        (5, math.nan),
        (5, 86_401),
        (5, "1m"),
    ]:
        with pytest.raises(InvalidPayload):
            operating.set_rate(queue, "type", "rated", rate, period)
    with pytest.raises(InvalidPayload):
        operating.set_rate(queue, "scope", "rated", 5, 1)
    with pytest.raises(InvalidPayload):
        operating.set_rate(queue, "queue", "", 5, 1)
    assert operating.limit_rows(queue) == before


def test_rate_texts() -> None:
    assert parse_rate("50/1m") == (50, 60_000)
    assert parse_rate("10/s") == (10, 1000)
    assert parse_rate(" 5 / 500ms ") == (5, 500)
    assert parse_rate("100/30s") == (100, 30_000)
    assert parse_rate("1/d") == (1, 86_400_000)
    assert parse_rate((50, 60)) == (50, 60_000)
    for bad in ["", "50", "50/", "/m", "0/s", "5/0s", "5/2d", "5/1w", "-1/s", "1e3/s", 50, None]:
        with pytest.raises(InvalidPayload):
            parse_rate(bad)
    assert format_period(60_000) == "1m" and format_period(1500) == "1500ms"


def test_a_full_window_opens_when_its_oldest_start_leaves() -> None:
    rates = {("type", "t"): (3, 1000), ("key", "k"): (2, 500)}
    rows = [("type", "t", "", 3, 100), ("key", "k", "a", 1, 900), ("key", "k", "b", 2, 700)]
    window = Window(rates, rows, 1000)
    assert window.used(("type", "t", "")) == 3 and window.keys_used("k") == {"a": 1, "b": 2}
    assert window.opens({}) == 1100  # type full: its oldest start leaves at 1100
    assert window.opens({("key", "k", "a"): 1, ("key", "k", "c"): 2}) == 1100
    fresh = Window({("queue", "q"): (2, 1000)}, [], 1000)
    assert fresh.opens({("queue", "q"): 1}) is None
    assert fresh.opens({("queue", "q"): 2}) == 2000  # filled by this claim
    pushed = Window(rates, [("type", "t", "", 3, 5000 - 1000)], 1000)  # held until 5000
    assert pushed.used(("type", "t", "")) == 3 and pushed.opens({}) == 5000


class Body(Payload):
    customer: str = ""


def test_declarations_are_checked() -> None:
    def handler(payload: Body, ctx: Any) -> None: ...

    for bad in ["0/s", "5/2d", "fast", (0, 1), (5, math.inf)]:
        with pytest.raises(JobTypeDeclarationError, match="rate"):
            job_type("bad_rate", rate=bad)
        registry = JobTypeRegistry()
        with pytest.raises(JobcoreError, match="rate"):
            registry.register(
                JobType(name="bad_rate", payload_model=Body, handler=handler, rate=bad), plugin="p"
            )  # type: ignore[arg-type]
    registry = JobTypeRegistry()
    registry.register(
        JobType(
            name="keyed",
            payload_model=Body,
            handler=handler,
            rate="5/m",
            concurrency_key="customer",
        ),
        plugin="p",
    )  # a key with a rate alone is enough
