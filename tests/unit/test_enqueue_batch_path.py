"""`enqueue_many` builds a batch with the checks of one-by-one enqueues (a NaN probe and the
ids done once for the batch) and names the item it refuses; `new_ids` and
`new_job_from_values` match what they replace."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from jobcore import JobType, Queue, hookimpl
from jobcore.errors import InvalidPayload, PayloadTooLarge
from jobcore.ids import new_id, new_ids
from jobcore.models import NewJob, new_job_from_values, strict_json
from jobcore.testing import make_queue


@pytest.fixture
def queue(tmp_path: Path) -> Queue:
    return Queue(str(tmp_path / "jobs.db"))


class MetaCounter:
    def __init__(self) -> None:
        self.seen: list[Any] = []

    @hookimpl
    def jobcore_enqueue_meta(self, job: NewJob) -> dict[str, Any]:
        self.seen.append(job.payload)
        return {"n": len(self.seen)}


def test_new_ids_sort_after_earlier_ids_and_are_uuid7() -> None:
    ids = [new_id(), *new_ids(5000), new_id(), *new_ids(3), *new_ids(0)]
    assert len(ids) == 5005 and ids == sorted(ids) and len(set(ids)) == len(ids)
    for made in ids:
        parsed = uuid.UUID(made)
        assert parsed.version == 7 and parsed.variant == uuid.RFC_4122 and str(parsed) == made


def test_new_job_from_values_equals_the_constructed_job() -> None:
    fields: dict[str, Any] = {
        "id": "i",
        "type": "t",
        "queue": "q",
        "payload": {"a": 1},
        "priority": 2,
        "max_attempts": 3,
        "run_at": None,
        "timeout_ms": 4,
        "idempotency_key": "k",
        "parent_id": "p",
        "meta": {"m": 1},
        "delay_ms": 5,
        "payload_json": '{"a":1}',
        "limit_key": "c",
    }
    made = new_job_from_values(list(fields.values()))
    assert made == NewJob(**fields) and made.payload_json == '{"a":1}'
    with pytest.raises(TypeError):
        new_job_from_values([1, 2])


def test_a_batch_stores_what_one_by_one_enqueues_store(queue: Queue) -> None:
    payloads: list[Any] = [{"sleep": n / 7, "fail": n % 3 == 0} for n in range(50)]
    payloads += [{}, None, {"sleep": 1e-300}, {"fail": True, "sleep": 2}]
    batch = queue.enqueue_many("noop", payloads, priority=2, queue="q")
    assert len({item.job.id for item in batch}) == len(payloads)
    for item, payload in zip(batch, payloads, strict=True):
        alone = queue.build("noop", payload, priority=2, queue="q")
        job = item.job
        assert (job.payload, job.queue, job.priority) == (alone.payload, "q", 2)
        assert queue.get(job.id).payload == alone.payload
        assert strict_json(job.payload) == alone.payload_json


@pytest.mark.parametrize(
    "bad, error, message",
    [
        ({"sleep": "long"}, InvalidPayload, r"^item 3: invalid payload for 'noop': sleep"),
        ({"sleep": float("nan")}, InvalidPayload, r"^item 3: payload for 'noop' has a non-fin"),
        ({"colour": "\ud800"}, InvalidPayload, r"^item 3: invalid payload for 'noop': colour"),
        ([1], InvalidPayload, r"^item 3: payload for 'noop' must be a JSON object, not list"),
    ],
)
def test_a_bad_item_is_named_and_nothing_is_written(
    queue: Queue, bad: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        queue.enqueue_many("noop", [{}, {"sleep": 1}, bad, {}])
    assert queue.list_jobs() == []


def test_an_oversized_item_is_named(tmp_path: Path) -> None:
    queue = Queue(str(tmp_path / "jobs.db"))
    queue.config.core.max_payload_bytes = 30
    with pytest.raises(PayloadTooLarge, match=r"^item 2: payload for 'noop' is 3\d bytes"):
        queue.enqueue_many("noop", [{}, {"sleep": 0.123456789012345, "fail": True}])
    assert queue.list_jobs() == []


def test_meta_hooks_run_once_per_job_even_when_a_bad_item_is_found(tmp_path: Path) -> None:
    counter = MetaCounter()
    queue = make_queue(tmp_path / "jobs.db", counter)
    with pytest.raises(InvalidPayload, match=r"^item 3:"):
        queue.enqueue_many("noop", [{"sleep": 1}, {"sleep": 2}, {"sleep": "x"}])
    assert [seen["sleep"] for seen in counter.seen] == [1, 2]  # as item by item: then the error
    counter.seen.clear()
    inserted = queue.enqueue_many("noop", [{"sleep": n} for n in range(4)])
    assert [seen["sleep"] for seen in counter.seen] == [0, 1, 2, 3]
    assert [item.job.meta for item in inserted] == [{"n": n} for n in range(1, 5)]


class Counted(BaseModel):
    n: int


class CountedType:
    """A job type whose `check` and `idempotency_key` note every call."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    @hookimpl
    def jobcore_register_job_types(self, register: Callable[[JobType], None]) -> None:
        def key(model: Counted) -> str | None:
            self.calls.append(f"key {model.n}")
            return None

        register(
            JobType(
                name="counted",
                payload_model=Counted,
                handler=lambda payload, ctx: None,
                check=lambda model, config: self.calls.append(f"check {model.n}"),
                idempotency_key=key,
            )
        )


def test_a_types_check_and_key_run_once_per_item_before_a_bad_one(tmp_path: Path) -> None:
    counted = CountedType()
    queue = make_queue(tmp_path / "jobs.db", counted)
    with pytest.raises(InvalidPayload, match=r"^item 3:"):
        queue.enqueue_many("counted", [{"n": 1}, {"n": 2}, {"n": "x"}])
    assert counted.calls == ["check 1", "key 1", "check 2", "key 2"]


def test_bad_meta_is_refused_at_the_first_item(queue: Queue) -> None:
    with pytest.raises(InvalidPayload, match=r"^item 1: meta of a 'noop' job has a non-finite"):
        queue.enqueue_many("noop", [{"sleep": n} for n in range(4)], meta={"x": float("inf")})
    assert queue.list_jobs() == []


def test_an_option_equal_to_a_resolved_one_but_of_another_type_is_checked(queue: Queue) -> None:
    queue.enqueue("noop", {}, priority=1)
    with pytest.raises(InvalidPayload, match="priority must be an integer"):
        queue.enqueue("noop", {}, priority=True)
    with pytest.raises(InvalidPayload, match="priority must be an integer"):
        queue.enqueue("noop", {}, priority=1.0)
    with pytest.raises(InvalidPayload, match="queue must be a non-empty string"):
        queue.enqueue("noop", {}, queue=["a"])  # unhashable: checked, not remembered
