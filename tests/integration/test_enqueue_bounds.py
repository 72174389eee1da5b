"""Enqueue options out of range are refused by `Queue.build`, naming the option.

Before, `priority=2**70` or `timeout=inf` passed `build`: `Queue.enqueue` raised a
bare OverflowError, and a handler's `ctx.enqueue` went through, then the store
refused the parent's completion, so the parent failed after its side effects.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

import jobcore_test_plugin as tp
import pytest

from jobcore import InvalidPayload, JobContext, JobStatus, JobType, Payload, Queue, Worker, hookimpl
from jobcore.limits import INT32_MAX, INT32_MIN

MakeQueue = Callable[..., Queue]


class ChildOptions(Payload):
    options: dict[str, Any]


class Spawner:
    """A handler that enqueues a child with the given options and survives a refusal."""

    @hookimpl
    def jobcore_register_job_types(self, register: Callable[[JobType], None]) -> None:
        register(JobType(name="spawner", payload_model=ChildOptions, handler=self.spawn))

    @staticmethod
    def spawn(payload: ChildOptions, ctx: JobContext) -> str:
        special = {"huge": 2**70, "inf": math.inf}  # values a JSON payload cannot carry
        options = {
            k: special.get(v, v) if isinstance(v, str) else v for k, v in payload.options.items()
        }
        try:
            ctx.enqueue("noop", {}, **options)
        except InvalidPayload as exc:
            return f"refused: {exc}"
        return "spawned"


@pytest.fixture
def queue(jobcore_make_queue: MakeQueue) -> Queue:
    return jobcore_make_queue(tp, Spawner())


BAD = [
    ({"priority": 2**70}, "priority must be an integer from"),
    ({"priority": INT32_MAX + 1}, "priority must be an integer from"),
    ({"priority": INT32_MIN - 1}, "priority must be an integer from"),
    ({"priority": 1.5}, "priority must be an integer, not float"),
    ({"priority": "9"}, "priority must be an integer, not str"),
    ({"queue": 7}, "queue must be a non-empty string"),
    ({"queue": " "}, "queue must be a non-empty string"),
    ({"timeout": math.inf}, "timeout must be between"),
    ({"timeout": math.nan}, "timeout must be between"),
    ({"timeout": -1}, "timeout must be between"),
    ({"timeout": 0}, "timeout must be between"),
    ({"timeout": 1e300}, "timeout must be between"),
    ({"max_attempts": 0}, "max_attempts must be an integer from 1"),
    ({"max_attempts": 2**40}, "max_attempts must be an integer from 1"),
    ({"max_attempts": True}, "max_attempts must be an integer, not bool"),
    ({"delay": 1e300}, "delay must be between"),
    ({"delay": math.nan}, "delay must be between"),
    ({"delay": -1}, "delay must be between"),
    ({"run_at": 2**70}, "run_at must be a time in ms"),
    ({"idempotency_key": 5}, "idempotency_key must be a string"),
]


@pytest.mark.parametrize(("options", "message"), BAD, ids=[repr(o) for o, _ in BAD])
def test_an_out_of_range_option_is_invalid_payload_naming_it(
    queue: Queue, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidPayload, match=message.replace("(", r"\(")):
        queue.enqueue("noop", {}, **options)
    assert queue.list_jobs(limit=10) == []


def test_the_bounds_themselves_are_accepted(queue: Queue) -> None:
    for options in (
        {"priority": INT32_MAX, "max_attempts": INT32_MAX, "timeout": 0.001},
        {"priority": INT32_MIN, "queue": "q", "delay": 0, "timeout": 100 * 365 * 86400.0},
    ):
        queue.enqueue("noop", {}, **options)
    assert len(queue.list_jobs(limit=10)) == 2


@pytest.mark.parametrize(
    "options", [{"priority": "huge"}, {"timeout": "inf"}, {"queue": 3}, {"max_attempts": 0}]
)
def test_a_handlers_bad_child_raises_inside_the_handler(
    queue: Queue, options: dict[str, Any]
) -> None:
    parent = queue.enqueue("spawner", {"options": options}).job
    worker = Worker(queue, until_empty=True)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    thread.join(20)
    assert not thread.is_alive()
    done = queue.get(parent.id)
    assert done.status is JobStatus.COMPLETED, done.last_error
    assert str(done.result).startswith("refused: ")
    assert [job.id for job in queue.list_jobs(limit=10)] == [parent.id]
