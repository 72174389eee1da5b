"""Text over PostgreSQL's btree entry limit (2704 bytes): refused at enqueue naming the
field, a permanent error (class 54) if it reaches the server anyway, and a child too
large for the store fails its parent alone, never wedging the worker (DESIGN §5, §6)."""

from __future__ import annotations

import dataclasses
import secrets
import threading
from typing import Any

import jobcore_test_plugin as tp
import pytest

from jobcore import JobContext, JobType, Payload, Queue, Worker, hookimpl
from jobcore.errors import InvalidPayload, JobNotFound, PermanentStorageError, TransientStorageError
from jobcore.limits import MAX_KEY_BYTES, MAX_NAME_BYTES
from jobcore.models import Completed, JobStatus, Lease
from jobcore.testing import make_queue

CJK = "漢"  # 3 bytes in UTF-8: 1,000 of them pass a 1,000-character check
# random text: PostgreSQL compresses an index entry, so "k" * 5000 would fit


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("idempotency_key", CJK * 1000),
        ("idempotency_key", "k" * (MAX_KEY_BYTES + 1)),
        ("queue", CJK * 1000),
        ("parent_id", "p" * (MAX_NAME_BYTES + 1)),
    ],
)
def test_enqueue_refuses_text_over_its_byte_limit(queue: Queue, option: str, value: str) -> None:
    with pytest.raises(
        InvalidPayload,
        match=rf"^{option} is \d+ bytes as UTF-8, over the \d+-byte limit; shorten it",
    ):
        queue.enqueue("noop", {}, **{option: value})
    with pytest.raises(InvalidPayload, match=option):
        queue.enqueue_many("noop", [{}], **{option: value})
    assert queue.list_jobs() == []


def test_text_at_its_byte_limit_is_stored(queue: Queue) -> None:
    key = CJK * (MAX_KEY_BYTES // 3)
    job = queue.enqueue("noop", {}, idempotency_key=key, queue="q" * MAX_NAME_BYTES).job
    assert queue.get(job.id).idempotency_key == key


def test_an_oversized_value_at_the_server_is_permanent_and_named(queue: Queue) -> None:
    """Class 54 reaching the store (a value past the enqueue checks) is not a lost
    connection: it is not retried and says which field is too large."""
    storage: Any = queue.storage
    job = queue.build("noop", {})
    big = dataclasses.replace(job, idempotency_key=secrets.token_hex(2500))
    with pytest.raises(PermanentStorageError, match="type and idempotency_key") as caught:
        storage.insert([big])
    assert not isinstance(caught.value, TransientStorageError)
    assert "is the server up" not in str(caught.value)
    big_queue = dataclasses.replace(job, queue=secrets.token_hex(2500))
    with pytest.raises(PermanentStorageError, match="the queue of a job is too large"):
        storage.insert([big_queue])
    assert queue.list_jobs() == []


def test_a_child_too_large_for_the_store_fails_its_parent_alone(queue: Queue) -> None:
    """In one group commit: the completion whose child the server refuses becomes a
    failure of that job; the other outcome and the claim go through."""
    storage: Any = queue.storage
    queue.enqueue_many("noop", [{}, {}, {}])
    _, [first, second] = storage.commit_batch([], worker="w", claim_limit=2, lease_ms=60_000)
    child = dataclasses.replace(queue.build("noop", {}), idempotency_key=secrets.token_hex(2500))
    outcomes = [
        Completed(Lease.of(first), "parent", children=(child,)),
        Completed(Lease.of(second), "fine"),
    ]
    recorded, claimed = storage.commit_batch(outcomes, worker="w", claim_limit=1, lease_ms=60_000)
    assert [r.state for r in recorded] == ["recorded", "recorded"]
    assert queue.get(first.id).status is JobStatus.FAILED
    assert "could not record outcome" in (queue.get(first.id).last_error or "")
    assert queue.get(second.id).status is JobStatus.COMPLETED
    assert len(claimed) == 1
    with pytest.raises(JobNotFound):
        queue.get(child.id)


class Spawn(Payload):
    long_child: bool = False


def _spawn(payload: Spawn, ctx: JobContext) -> str:
    if payload.long_child:
        ctx.enqueue("noop", {}, idempotency_key=CJK * 1000)
    return "done"


class _Plugin:
    @hookimpl
    def jobcore_register_job_types(self, register: Any) -> None:
        register(JobType(name="spawn", payload_model=Spawn, handler=_spawn, max_attempts=1))


def test_a_worker_whose_handler_enqueues_an_oversized_child_goes_on(pg_url: str) -> None:
    """The reviewer's wedge: the worker retried the group commit forever ("is the server
    up"), its jobs stayed claimed and pending ones never ran."""
    import jobcore_postgres

    queue = make_queue(pg_url, jobcore_postgres, tp, _Plugin())
    try:
        queue.storage.migrate()
        bad = queue.enqueue("spawn", {"long_child": True}).job
        good = queue.enqueue_many("spawn", [{}] * 10)
        worker = Worker(queue, concurrency=2, until_empty=True, lease=5)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        thread.join(30)
        assert not thread.is_alive(), "the worker never drained the queue"
        failed = queue.get(bad.id)
        assert failed.status is JobStatus.FAILED
        assert "idempotency_key is 3000 bytes as UTF-8" in (failed.last_error or "")
        assert {queue.get(r.job.id).status for r in good} == {JobStatus.COMPLETED}
    finally:
        queue.close()
