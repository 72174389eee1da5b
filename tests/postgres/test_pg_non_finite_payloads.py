"""On PostgreSQL too, NaN and Infinity in payloads are refused at enqueue, not at write time.

Before, the server refused them inside the enqueue transaction (or the worker's
group commit, for a child), far from the code that made them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import jobcore_postgres
import jobcore_test_plugin as tp
import pytest

from jobcore import InvalidPayload, JobStatus, JobType, Queue, hookimpl
from jobcore.builtin.noop import NoopPayload
from jobcore.testing import drain, make_queue


def nan_child(payload: NoopPayload, ctx: Any) -> str:
    ctx.enqueue("noop", {"sleep": math.nan})
    return "unreachable"


class NanChildPlugin:
    @hookimpl
    def jobcore_register_job_types(self, register: Callable[[JobType], None]) -> None:
        register(JobType(name="nan_child", payload_model=NoopPayload, handler=nan_child))


@pytest.fixture
def queue(pg_url: str) -> Iterator[Queue]:
    queue = make_queue(pg_url, jobcore_postgres, tp, NanChildPlugin())
    queue.storage.migrate()
    yield queue
    queue.close()


def test_enqueue_refuses_nan_before_the_server_sees_it(queue: Queue) -> None:
    with pytest.raises(InvalidPayload, match=r"payload for 'noop' .*NaN or Infinity.* at sleep"):
        queue.enqueue("noop", {"sleep": math.inf})
    with pytest.raises(InvalidPayload, match=r"^item 1: .* at sleep"):
        queue.enqueue_many("noop", [{"sleep": math.nan}])
    with pytest.raises(InvalidPayload, match=r"meta of a 'noop' job .* at score"):
        queue.enqueue("noop", {}, meta={"score": -math.inf})
    assert queue.list_jobs() == []


def test_a_child_with_nan_fails_only_its_parent(queue: Queue) -> None:
    parent = queue.enqueue("nan_child", {}, max_attempts=3).job
    other = queue.enqueue("noop", {}).job
    drain(queue)
    failed = queue.get(parent.id)
    assert failed.status is JobStatus.FAILED and failed.attempts == 1
    assert (failed.last_error or "").startswith("InvalidPayload: payload for 'noop'")
    assert queue.get(other.id).status is JobStatus.COMPLETED
    assert [job.id for job in queue.list_jobs(limit=10)] != [] and all(
        job.parent_id is None for job in queue.list_jobs(limit=10)
    )
