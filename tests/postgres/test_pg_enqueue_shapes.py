"""The PostgreSQL insert's shapes (one job; a batch sharing its options; a mixed batch) and
the single enqueue's own pool checkout: what they write and answer, never how fast."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from jobcore_postgres.storage import PostgresStorage
from pg_testing import new_job

from jobcore import Queue
from jobcore.errors import StorageError


def _events(queue: Queue) -> list[tuple[str, str | None]]:
    """The store's events as readers get them (a batch's one row expanded per job)."""
    return [(e.kind, e.job_id) for e in queue.storage.events_after(0, 100_000)]


def test_shape_is_shared_only_when_all_but_id_payload_and_key_agree() -> None:
    shape = PostgresStorage._shape
    assert shape([new_job(id="a")]) == "single"
    assert (
        shape([new_job(id="a", payload={"sleep": 1}), new_job(id="b", idempotency_key="k")])
        == "shared"
    )
    for change in (
        {"type": "other"},
        {"queue": "mail"},
        {"priority": 1},
        {"max_attempts": 5},
        {"run_at": 5},
        {"delay_ms": 10},
        {"timeout_ms": 100},
        {"parent_id": "p"},
        {"meta": {"a": 1}},
    ):
        assert shape([new_job(id="a"), new_job(id="b", **change)]) == "many", change


def test_a_batch_sharing_its_options_stores_each_payload_and_key(
    queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[str] = []
    execute = psycopg.Cursor.execute

    def recording(cursor: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(str(query))
        return execute(cursor, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", recording)
    payloads = [{"sleep": n / 10, "fail": n % 2 == 0} for n in range(5)] + [{}]
    inserted = queue.enqueue_many(
        "noop", payloads, queue="mail", priority=4, delay=60, max_attempts=2, timeout=1.5,
        meta={"m": "é"},
    )  # fmt: skip
    assert [item.created for item in inserted] == [True] * 6
    for item, payload in zip(inserted, payloads, strict=True):
        stored = queue.get(item.job.id)
        assert stored == item.job
        assert stored.payload == {"sleep": 0.0, "fail": False, **payload}
        assert (stored.queue, stored.priority, stored.max_attempts) == ("mail", 4, 2)
        assert (stored.timeout_ms, stored.meta, stored.status) == (1500, {"m": "é"}, "scheduled")
        assert stored.run_at == stored.created_at + 60_000
    assert _events(queue) == [("job:enqueued", item.job.id) for item in inserted]
    [insert] = [sql for sql in sent if "INSERT INTO" in sql]
    shared = "unnest(%(ids)b::text[], %(payloads)b::text[], %(keys)b::text[], %(limit_keys)b"
    assert shared in insert
    assert insert.endswith("GROUP BY status, created_at, run_at")  # one row answers for all


def test_a_shared_batch_with_keys_skips_each_duplicate(queue: Queue) -> None:
    storage: Any = queue.storage
    held = queue.enqueue("noop", {}, idempotency_key="k2").job
    jobs = [new_job(id=f"id-{n}", idempotency_key=f"k{n}") for n in range(1, 4)]
    assert storage._shape(jobs) == "shared"
    inserted = queue.insert(jobs)
    assert [item.created for item in inserted] == [True, False, True]
    assert inserted[1].job.id == held.id
    assert [queue.get(f"id-{n}").idempotency_key for n in (1, 3)] == ["k1", "k3"]
    assert [job_id for _, job_id in _events(queue)] == [held.id, "id-1", "id-3"]


def test_a_mixed_batch_stores_each_job_its_own_options(queue: Queue) -> None:
    jobs = [
        new_job(id="a", queue="mail", priority=2, payload={"sleep": 1}, payload_json=None),
        new_job(id="b", run_at=1_000, meta={"x": [1]}, timeout_ms=700),
        new_job(id="c", delay_ms=90_000, max_attempts=9, parent_id="a"),
    ]
    inserted = queue.insert(jobs)
    stored = {job_id: queue.get(job_id) for job_id in "abc"}
    assert [item.job for item in inserted] == [stored[job_id] for job_id in "abc"]
    assert (stored["a"].queue, stored["a"].priority, stored["a"].payload) == (
        "mail",
        2,
        {"sleep": 1},
    )
    assert (stored["b"].run_at, stored["b"].meta, stored["b"].timeout_ms) == (
        1_000,
        {"x": [1]},
        700,
    )
    assert stored["b"].status == "pending"
    assert (stored["c"].max_attempts, stored["c"].parent_id, stored["c"].status) == (
        9,
        "a",
        "scheduled",
    )
    assert stored["c"].run_at == stored["c"].created_at + 90_000


def test_a_shared_batch_joins_the_application_transaction(queue: Queue, pg_url: str) -> None:
    with psycopg.connect(pg_url.split("?")[0]) as conn, conn.transaction():
        queue.enqueue_many("noop", [{"sleep": 1}, {}], conn=conn)
        raise psycopg.Rollback()
    assert queue.list_jobs() == []
    with queue.transaction():
        inserted = queue.enqueue_many("noop", [{"sleep": 1}, {}])
    assert {job.id for job in queue.list_jobs()} == {item.job.id for item in inserted}


def test_one_enqueue_returns_its_connection_to_the_pool(
    queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage: Any = queue.storage
    storage._pool.resize(1, 1)  # a connection not given back would block the next enqueue
    inserting: set[int] = set()
    execute = psycopg.Cursor.execute

    def recording(cursor: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        if "INSERT INTO" in str(query):
            inserting.add(id(cursor))
        return execute(cursor, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", recording)
    for n in range(3):
        queue.enqueue("noop", {"sleep": n})
    assert len(inserting) == 1  # the connection's kept cursor, not a new one per statement
    with pytest.raises(StorageError, match="PostgreSQL at"):
        queue.insert([new_job(id="x", payload_json="not json")])
    for _ in range(2):
        queue.enqueue("noop", {})
    assert storage._pool.get_stats()["pool_size"] == 1
    assert len(queue.list_jobs()) == 5


def test_one_enqueue_inside_a_transaction_rolls_back_with_it(queue: Queue) -> None:
    with pytest.raises(RuntimeError), queue.transaction():
        queue.enqueue("noop", {})
        raise RuntimeError("changed my mind")
    assert queue.list_jobs() == [] and _events(queue) == []
