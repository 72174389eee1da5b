"""The PostgreSQL store's hot paths: enqueue statements, claim plans, JSON decoding.

These check what the faster paths do (statements sent, plans the server keeps,
values written and read back), never how fast they are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from jobcore_postgres.rows import json_loads, row_to_job
from jobcore_postgres.statements import JOB_COLUMNS, Dialect, owner_statement

from jobcore import Queue
from jobcore.models import Cancelled, Completed, Failed, JobStatus, Lease, Released, Retrying
from jobcore.transitions import OWNER


class Statements:
    """Every statement the store's pooled connections send, in order."""

    def __init__(self) -> None:
        self.sent: list[str] = []


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Statements:
    seen = Statements()
    execute: Callable[..., Any] = psycopg.Cursor.execute

    def recording(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        seen.sent.append(str(query))
        return execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", recording)
    return seen


class NoTransactions:
    """Fails the block if any psycopg transaction block is opened inside it."""

    def __enter__(self) -> NoTransactions:
        self.calls = 0
        original = psycopg.Connection.transaction

        def counting(conn: psycopg.Connection[Any], *args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return original(conn, *args, **kwargs)

        self._patch = pytest.MonkeyPatch()
        self._patch.setattr(psycopg.Connection, "transaction", counting)
        return self

    def __exit__(self, *exc: object) -> None:
        self._patch.undo()
        assert self.calls == 0, "a keyless batch opened a transaction block"


def test_keyless_batch_is_one_statement_without_a_transaction_block(
    queue: Queue, statements: Statements
) -> None:
    with NoTransactions():
        inserted = queue.enqueue_many("noop", [{"sleep": 0}, {}, {}])
    assert [item.created for item in inserted] == [True, True, True]
    inserts = [sql for sql in statements.sent if "INSERT INTO" in sql]
    assert len(inserts) == 1
    assert "ON CONFLICT" not in inserts[0]
    assert {job.id for job in queue.list_jobs()} == {item.job.id for item in inserted}


def test_keyed_batch_still_skips_duplicates_in_one_transaction(
    queue: Queue, statements: Statements
) -> None:
    first = queue.enqueue("noop", {}, idempotency_key="k1")
    again = queue.enqueue_many("noop", [{}, {}], idempotency_key="k1")
    assert [item.created for item in again] == [False, False]
    assert {item.job.id for item in again} == {first.job.id}
    assert any("ON CONFLICT" in sql for sql in statements.sent)


def test_one_job_and_a_batch_store_the_same_values(queue: Queue) -> None:
    options: dict[str, Any] = {
        "queue": "mail",
        "priority": 7,
        "delay": 30,
        "max_attempts": 5,
        "timeout": 2.5,
        "meta": {"who": "me"},
    }
    one = queue.enqueue("noop", {"sleep": 0.5}, **options).job
    [many] = queue.enqueue_many("noop", [{"sleep": 0.5}], **options)
    for job in (one, many.job):
        stored = queue.get(job.id)
        assert stored == job
        assert (stored.queue, stored.priority, stored.max_attempts) == ("mail", 7, 5)
        assert stored.status == "scheduled"
        assert stored.run_at == stored.created_at + 30_000
        assert (stored.timeout_ms, stored.meta) == (2500, {"who": "me"})
        assert stored.payload == one.payload and stored.payload["sleep"] == 0.5
    parent = queue.enqueue("noop", {}, run_at=1_000).job
    child = queue.enqueue("noop", {}, parent_id=parent.id, run_at=2_000).job
    assert (queue.get(parent.id).status, queue.get(child.id).parent_id) == ("pending", parent.id)
    assert queue.get(child.id).run_at == 2_000


def test_claims_keep_one_generic_plan(queue: Queue) -> None:
    """The claim is planned once per connection, not again at every execution."""
    storage: Any = queue.storage
    storage._pool.resize(1, 1)  # every claim on the one connection whose plans are read
    queue.enqueue_many("noop", [{}] * 12)
    claimed: list[Any] = []
    for _ in range(12):
        _, claimed = storage.commit_batch(
            [Completed(Lease.of(job), None) for job in claimed],
            worker="w",
            claim_limit=1,
            lease_ms=60_000,
            types=("noop",),
        )
    with storage._connection() as conn:
        plans = conn.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE statement LIKE 'WITH picked AS%%'"
        ).fetchall()
    assert plans, "the claim was never prepared"
    [(generic, custom)] = plans
    assert custom == 0 and generic > 0


def test_json_columns_decode_to_fresh_objects(queue: Queue) -> None:
    a = queue.enqueue("noop", {}).job
    b = queue.enqueue("noop", {"sleep": 0}, meta={"é": ["x", 1.5, None]}).job
    first, second = queue.get(a.id), queue.get(a.id)
    assert first.payload == a.payload and first.errors == [] and first.history == []
    assert first.errors is not second.errors and first.payload is not second.payload
    assert queue.get(b.id).meta == {"é": ["x", 1.5, None]}


@pytest.mark.parametrize(
    "data, expected",
    [
        (b"[]", []),
        (b"{}", {}),
        (b"null", None),
        (b'{"a": [1, 2.5, "\\u00e9"]}', {"a": [1, 2.5, "é"]}),
        ('{"a": "é"}'.encode(), {"a": "é"}),
        (memoryview(b"[1]"), [1]),
        ("[true]", [True]),
    ],
)
def test_json_loads(data: Any, expected: Any) -> None:
    assert json_loads(data) == expected
    if isinstance(expected, list | dict):
        assert json_loads(data) is not json_loads(data)  # callers may change what they get


def test_pooled_connections_decode_json_with_json_loads(queue: Queue) -> None:
    storage: Any = queue.storage
    with storage._connection() as conn:
        for name in ("json", "jsonb"):
            oid = conn.adapters.types[name].oid
            loader = conn.adapters.get_loader(oid, psycopg.pq.Format.TEXT)
            assert loader is not None and loader._loads is json_loads  # type: ignore[attr-defined]


def test_a_batch_answers_each_report_with_its_own_row(queue: Queue) -> None:
    """Answers are matched to reports by job id, also when a job is reported twice."""
    storage: Any = queue.storage
    queue.enqueue_many("noop", [{}] * 6)
    _, claimed = storage.commit_batch([], worker="w", claim_limit=6, lease_ms=60_000)
    outcomes = [Completed(Lease.of(job), {"n": n}) for n, job in enumerate(reversed(claimed))]
    outcomes.append(outcomes[2])  # the same report again, in the same batch
    recorded, _ = storage.commit_batch(outcomes, worker="w", claim_limit=0, lease_ms=60_000)
    assert [answer.job.id for answer in recorded if answer.job] == [
        o.lease.job_id for o in outcomes
    ]
    assert [answer.state for answer in recorded] == ["recorded"] * 6 + ["already"]
    assert [answer.job.result for answer in recorded[:6]] == [{"n": n} for n in range(6)]
    assert all(queue.get(o.lease.job_id).result == o.result for o in outcomes)


def test_none_results_are_stored_as_json_null(queue: Queue) -> None:
    storage: Any = queue.storage
    queue.enqueue("noop", {})
    _, [job] = storage.commit_batch([], worker="w", claim_limit=1, lease_ms=60_000)
    [answer] = storage.record([Completed(Lease.of(job), None)])
    assert answer.state == "recorded" and answer.job.result is None
    with storage._connection() as conn:
        [(text,)] = conn.execute(
            f"SELECT result::text FROM {storage.schema}.jobs WHERE id = %s", (job.id,)
        ).fetchall()
    assert text == "null"


def test_recorded_jobs_are_the_stored_rows(queue: Queue) -> None:
    """The job answered for each kind of outcome (built from a slim answer and the claimed
    row) is the row as stored, field for field."""
    storage: Any = queue.storage
    queue.enqueue_many("noop", [{}] * 5)
    _, claimed = storage.commit_batch([], worker="w", claim_limit=5, lease_ms=60_000)
    storage.mark_started([Lease.of(job) for job in claimed[:2]])
    leases = [Lease.of(job) for job in claimed]
    outcomes = [
        Completed(leases[0], {"n": 1}),
        Retrying(leases[1], "boom", delay_ms=5_000),
        Failed(leases[2], "bad"),
        Released(leases[3]),
        Cancelled(leases[4], "stop"),
    ]
    recorded, _ = storage.commit_batch(outcomes, worker="w", claim_limit=0, lease_ms=60_000)
    assert [answer.state for answer in recorded] == ["recorded"] * 5
    for answer in recorded:
        assert answer.job == queue.get(answer.outcome.lease.job_id)
    statuses = [answer.job.status for answer in recorded]
    assert statuses == [
        JobStatus.COMPLETED,
        JobStatus.SCHEDULED,
        JobStatus.FAILED,
        JobStatus.PENDING,
        JobStatus.CANCELLED,
    ]


def test_row_to_job_takes_longer_and_shorter_rows(queue: Queue) -> None:
    """Columns past the job's are ignored; a row without the last ones gets their defaults."""
    job = queue.enqueue("noop", {}).job
    storage: Any = queue.storage
    with storage._connection() as conn:
        [row] = conn.execute(
            f"SELECT {', '.join(JOB_COLUMNS)}, 42 FROM {storage.schema}.jobs WHERE id = %s",
            (job.id,),
        ).fetchall()
    assert row_to_job(row) == job
    width = len(JOB_COLUMNS)
    shorter = row_to_job(row[: width - 1])  # without history
    assert shorter.history == [] and shorter.status is JobStatus.PENDING
    assert shorter.id == job.id and shorter.payload == job.payload


@pytest.mark.parametrize("kind", list(OWNER))
def test_owner_statements_send_only_the_report_arrays_they_read(kind: type) -> None:
    for transition in OWNER[kind]:
        sql = owner_statement(transition, Dialect("s"))
        assert "%(ids)b" in sql and "%(lease_ids)b" in sql
        assert ("%(results)b" in sql) == ("v.result" in sql) == (kind is Completed)
        assert ("%(delays)s" in sql) == ("v.delay_ms" in sql)
        assert ("%(errors)b" in sql) == ("v.error" in sql)
    assert "%(errors)b" not in owner_statement(OWNER[Completed][0], Dialect("s"))


def _priority(storage: Any, job_id: str) -> int:
    with storage._connection() as conn:
        [(priority,)] = conn.execute(
            f"SELECT priority FROM {storage.schema}.jobs WHERE id = %s", (job_id,)
        ).fetchall()
    return int(priority)


def test_one_trip_is_one_transaction(queue: Queue) -> None:
    """A group commit's statements share one transaction: without BEGIN, up to the Sync."""
    storage: Any = queue.storage

    def send(conn: psycopg.Connection[Any]) -> list[Any]:
        return [conn.execute("SELECT pg_current_xact_id()::text") for _ in range(2)]

    def collect(conn: psycopg.Connection[Any], cursors: list[Any]) -> list[Any]:
        return [cursor.fetchone()[0] for cursor in cursors]

    first, second = storage._one_trip(send, collect)
    assert first == second


@pytest.mark.parametrize("failure", ["python", "server"])
def test_one_trip_that_fails_commits_nothing_and_leaves_a_usable_connection(
    queue: Queue,
    pg_storage_factory: Callable[..., Any],
    failure: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Statements queued before a failure, the server's or the sender's own, roll back (one
    Sync, an implicit transaction), and no open transaction reaches the pool."""
    storage = pg_storage_factory(pool_max=1)
    job = queue.enqueue("noop", {}).job
    new = queue.build("noop", {})

    def send(conn: psycopg.Connection[Any]) -> None:
        conn.execute(f"UPDATE {storage.schema}.jobs SET priority = 7 WHERE id = %s", (job.id,))
        storage._insert_on(conn, [new])
        if failure == "server":
            conn.execute("SELECT 1 / 0")
        else:
            raise ValueError("the sender failed")

    with pytest.raises(Exception, match=r"the sender failed|division by zero"):
        storage._one_trip(send, lambda conn, sent: sent)
    # rolled back before the pool took it back (else the pool warns, rolling it back)
    assert not [r for r in caplog.records if r.name.startswith("psycopg")]
    assert _priority(storage, job.id) == job.priority == 0
    assert storage.get(new.id) is None  # the same (only) pooled connection, idle again
    # the connection is clean: the next trip commits
    storage._one_trip(
        lambda conn: conn.execute(
            f"UPDATE {storage.schema}.jobs SET priority = 3 WHERE id = %s", (job.id,)
        ),
        lambda conn, sent: None,
    )
    assert _priority(storage, job.id) == 3
    storage.insert([new])
    assert storage.get(new.id) is not None
