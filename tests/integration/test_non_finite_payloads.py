"""NaN and Infinity are not JSON: every enqueue path refuses them before any store sees them."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jobcore_test_plugin as tp
import pytest

from jobcore import InvalidPayload, JobStatus, JobType, Payload, Queue, hookimpl
from jobcore.testing import drain

MakeQueue = Callable[..., Queue]


@pytest.fixture
def queue(jobcore_make_queue: MakeQueue) -> Queue:
    return jobcore_make_queue(tp, allow_unregistered_types=True)


@pytest.mark.parametrize(
    ("job_type", "payload", "where"),
    [
        ("noop", {"sleep": math.inf}, "at sleep"),  # a typed field: inf passes ge=0
        ("record", {"log": "x", "sleep": "nan"}, "at sleep"),  # the model parses "nan" to NaN
        ("unknown-here", {"data": [1, {"x": -math.inf}]}, "at data[1].x"),  # would become null
    ],
    ids=["typed", "parsed-from-string", "untyped"],
)
def test_enqueue_refuses_non_finite_numbers_naming_where(
    queue: Queue, job_type: str, payload: dict[str, Any], where: str
) -> None:
    with pytest.raises(InvalidPayload) as caught:
        queue.enqueue(job_type, payload)
    message = str(caught.value)
    assert f"payload for {job_type!r} has a non-finite number (NaN or Infinity)" in message
    assert where in message and "null or a string" in message
    assert queue.list_jobs() == []


def test_enqueue_many_names_the_item_and_writes_nothing(queue: Queue) -> None:
    with pytest.raises(InvalidPayload, match=r"^item 2: payload for 'noop' .* at sleep"):
        queue.enqueue_many("noop", [{"sleep": 0}, {"sleep": math.nan}])
    assert queue.list_jobs() == []


def test_meta_with_non_finite_numbers_is_refused(queue: Queue) -> None:
    with pytest.raises(InvalidPayload, match=r"meta of a 'noop' job .* at score"):
        queue.enqueue("noop", {}, meta={"score": math.nan})
    assert queue.list_jobs() == []


def test_finite_payloads_are_unchanged(queue: Queue) -> None:
    job = queue.enqueue("unknown-here", {"data": [1.5, -0.0, 1e308, None, "NaN"]}).job
    assert queue.get(job.id).payload == {"data": [1.5, -0.0, 1e308, None, "NaN"]}


class NanChildPayload(Payload):
    catch: bool = False


def nan_child(payload: NanChildPayload, ctx: Any) -> str:
    ctx.enqueue("noop", {})
    try:
        ctx.enqueue("noop", {"sleep": math.nan})
    except InvalidPayload as exc:
        if not payload.catch:
            raise
        return f"skipped a child: {exc}"
    return "unreachable"


class NanChildPlugin:
    @hookimpl
    def jobcore_register_job_types(self, register: Callable[[JobType], None]) -> None:
        register(JobType(name="nan_child", payload_model=NanChildPayload, handler=nan_child))


def test_a_child_with_nan_is_the_parents_own_error_and_blocks_nothing(
    jobcore_make_queue: MakeQueue,
) -> None:
    queue = jobcore_make_queue(tp, NanChildPlugin())
    raised = queue.enqueue("nan_child", {}, max_attempts=3).job
    handled = queue.enqueue("nan_child", {"catch": True}).job
    other = queue.enqueue("noop", {}).job
    drain(queue)

    failed = queue.get(raised.id)
    assert failed.status is JobStatus.FAILED
    assert failed.attempts == 1  # InvalidPayload is permanent: retrying cannot help
    assert (failed.last_error or "").startswith(
        "InvalidPayload: payload for 'noop' has a non-finite number (NaN or Infinity) at sleep"
    )
    completed = queue.get(handled.id)
    assert completed.status is JobStatus.COMPLETED
    assert str(completed.result).startswith("skipped a child: payload for 'noop'")
    assert queue.get(other.id).status is JobStatus.COMPLETED
    children = [job for job in queue.list_jobs(limit=100) if job.parent_id is not None]
    assert [job.parent_id for job in children] == [handled.id]  # the failed parent's were dropped
    assert children[0].status is JobStatus.COMPLETED
