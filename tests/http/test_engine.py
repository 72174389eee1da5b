"""The hub's writer in-process on a real SQLite file: group commit and batched claims."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from jobcore_http.engine import Engine, settle_all
from jobcore_http.store import SQLiteHubStore, TokenRecord, hub_store_for

from jobcore import Config, Queue
from jobcore.models import Completed, Lease


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[Queue]:
    with Queue(str(tmp_path / "jobs.db"), config=Config(env={})) as q:
        yield q


@pytest.fixture
def engine(queue: Queue) -> Iterator[Engine]:
    running = Engine(queue, lease_ms=30_000)
    running.start()
    yield running
    running.stop()


def test_many_writes_commit_in_few_transactions(queue: Queue, engine: Engine) -> None:
    futures = [engine.insert([queue.build("noop", {})]) for _ in range(300)]
    inserted = [future.result(30)[0] for future in futures]
    assert all(item.created for item in inserted)
    assert len({item.job.id for item in inserted}) == 300
    assert engine.rounds < 50  # one transaction per round, not per request


def test_waiting_claims_are_answered_together_and_each_job_once(
    queue: Queue, engine: Engine
) -> None:
    requests = [engine.claim(f"agent-{i}", 1, (), (), wait=10) for i in range(20)]
    queue.enqueue_many("noop", [{} for _ in range(20)])
    engine.changed()  # what the change waiter does when another connection commits
    claimed = [request.future.result(10) for request in requests]
    ids = [jobs[0].id for jobs in claimed]
    assert len(set(ids)) == 20
    assert {jobs[0].locked_by for jobs in claimed} == {f"agent-{i}" for i in range(20)}


def test_a_bad_write_fails_alone(queue: Queue, engine: Engine) -> None:
    good = queue.build("noop", {})
    # cannot be stored (`build` refuses such a queue name; a job built otherwise may hold it)
    bad = dataclasses.replace(queue.build("noop", {}), queue="\ud800")
    futures = [engine.insert([good]), engine.insert([bad])]
    assert futures[0].result(10)[0].created
    with pytest.raises(UnicodeError):
        futures[1].result(10)
    assert queue.get(good.id).status == "pending"


def test_hub_tables_migrate_idempotently(queue: Queue) -> None:
    store = hub_store_for(queue.storage)
    assert isinstance(store, SQLiteHubStore)
    store.migrate()
    store.add_token(TokenRecord("t", "ab" * 32, "read", None, 1))
    again = SQLiteHubStore(store.path)
    again.migrate()
    assert [t.name for t in again.list_tokens()] == ["t"]
    assert again.token_by_hash("ab" * 32) is not None
    assert again.revoke_token("t", 2) and again.token_by_hash("ab" * 32) is None
    again.close()
    store.close()


def test_writes_handed_in_together_are_awaited_together_in_order(
    queue: Queue, engine: Engine
) -> None:
    """`settle_all` waits once for a batch's writes and answers each in order, a write that
    failed with its own error (the batched reports route awaits its items this way)."""
    jobs = [queue.build("noop", {}) for _ in range(3)]
    queue.enqueue_many("noop", [{}, {}])
    claimed = engine.claim("w1", 2, (), (), 0.0, start=0).future.result(10)
    outcomes, beats, starts = engine.together(
        [Completed(Lease.of(claimed[0]), {"n": 1})],
        [Lease.of(claimed[1]), Lease(claimed[1].id, "not-the-lease", "w1")],
        [Lease.of(claimed[1])],
    )
    answered = asyncio.run(settle_all([*outcomes, *beats, *starts]))
    assert [type(answered[0]).__name__, *answered[1:]] == ["Recorded", False, None, "started"]
    assert answered[0].state == "recorded"
    assert queue.get(claimed[1].id).started_at is not None
    futures = [engine.insert([job]) for job in jobs[:2]]
    bad = dataclasses.replace(jobs[2], queue="\ud800")
    futures.insert(1, engine.insert([bad]))
    with pytest.raises(UnicodeError):
        asyncio.run(settle_all(futures))
    assert queue.get(jobs[0].id).status == "pending"
