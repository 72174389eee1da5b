"""`StorageContract`: the conformance suite every storage backend must pass.

Subclass it in a test module and provide a `storage_factory` fixture: a
callable `storage_factory(clock=None) -> Storage`. Within one test every call
returns a NEW handle (as another process would open) on the SAME store, which
the first call creates empty and migrated; `clock` (ms UTC) replaces the
store's clock for that handle. Close the handles at teardown::

    class TestMyBackend(StorageContract):
        @pytest.fixture
        def storage_factory(self, tmp_path):
            made = []
            def factory(clock=None):
                made.append(MyBackend(dsn, clock=clock))
                return made[-1]
            yield factory
            for storage in made:
                storage.close()

Optional backend hooks (each test needing one is skipped without it):
`app_connection` (an `AppConnection`: the application's own driver
connection to the same store, for the outbox and for holding the write lock)
and `busy_storage` (a handle whose writes give up quickly while another
connection holds the write lock).

Every rule of `jobcore.transitions` is checked, and recorded rows are
compared with `transitions.apply`, so a backend cannot re-derive the rules
differently. Time comes from the injected clock: the suite never sleeps to
make time pass.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, Protocol

import pytest

from jobcore import transitions as T
from jobcore.errors import IllegalTransition, StorageBusy, StorageError
from jobcore.ids import new_id
from jobcore.models import (
    Cancelled,
    Completed,
    Failed,
    Job,
    JobStatus,
    Lease,
    NewJob,
    Outcome,
    Released,
    Retrying,
)
from jobcore.storage.base import Storage

T0 = 1_800_000_000_000  # a fixed "now", ms
LEASE = 60_000
HOUR = 3_600_000


class FakeClock:
    """A store clock the test moves by hand (ms UTC)."""

    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now


class AppConnection(Protocol):
    """The application's own connection to the store (a backend hook of the suite)."""

    raw: Any  # what the application passes as `conn=` (SQLite: apsw.Connection)

    def begin(self) -> None:
        """Open a transaction that holds the store's write lock (SQLite: BEGIN IMMEDIATE)."""

    def execute(self, sql: str) -> None: ...

    def scalar(self, sql: str) -> Any: ...

    def commit(self) -> None: ...

    def rollback(self) -> None: ...


StorageFactory = Callable[..., Storage]


def new_job(type: str = "noop", **fields: Any) -> NewJob:
    values: dict[str, Any] = {
        "id": new_id(),
        "type": type,
        "queue": "default",
        "payload": {},
        "priority": 0,
        "max_attempts": 3,
        "run_at": T0,
        "timeout_ms": None,
        "idempotency_key": None,
    }
    values.update(fields)
    return NewJob(**values)


def lease_of(job: Job, worker: str | None = None) -> Lease:
    """The lease of a claimed job, without the claimed row (`worker` only labels it)."""
    assert job.lease_id is not None, f"job {job.id} was not claimed"
    return Lease(job.id, job.lease_id, worker or job.locked_by or "?")


class StorageContract:
    """Conformance tests; subclasses provide the `storage_factory` fixture."""

    # -- fixtures and helpers -------------------------------------------------------

    @pytest.fixture
    def clock(self) -> FakeClock:
        return FakeClock()

    @pytest.fixture
    def storage(self, storage_factory: StorageFactory, clock: FakeClock) -> Storage:
        return storage_factory(clock)

    @pytest.fixture
    def app_connection(self) -> Iterator[AppConnection]:
        pytest.skip("this backend's suite provides no app_connection fixture")
        yield None  # pragma: no cover

    @pytest.fixture
    def busy_storage(self) -> Storage:
        pytest.skip("this backend's suite provides no busy_storage fixture")

    def claim(self, storage: Storage, limit: int = 10, worker: str = "w1", **kw: Any) -> list[Job]:
        return storage.claim(worker=worker, limit=limit, lease_ms=LEASE, **kw)

    def one(self, storage: Storage, **job_fields: Any) -> Job:
        """Insert one job and claim it."""
        storage.insert([new_job(**job_fields)])
        [job] = self.claim(storage, limit=1)
        return job

    def kinds(self, storage: Storage, job_id: str) -> list[str]:
        return [e.kind for e in storage.events_after(0, 10_000) if e.job_id == job_id]

    # -- enqueue ------------------------------------------------------------

    def test_insert_and_get_round_trip(self, storage: Storage) -> None:
        job = new_job(payload={"a": [1, "x"]}, meta={"trace": "t"}, priority=5, timeout_ms=1500)
        [inserted] = storage.insert([job])
        assert inserted.created
        got = storage.get(job.id)
        assert got is not None
        assert got == inserted.job
        assert got.status is JobStatus.PENDING
        assert (got.payload, got.meta, got.priority, got.timeout_ms) == (
            {"a": [1, "x"]},
            {"trace": "t"},
            5,
            1500,
        )
        assert got.attempts == 0 and got.errors == [] and got.created_at == T0
        assert (got.lease_id, got.started_at, got.history) == (None, None, [])
        assert storage.get("no-such-id") is None

    def test_store_clock_decides_times(self, storage: Storage, clock: FakeClock) -> None:
        clock.now = T0 + 123
        assert storage.now() == T0 + 123
        [delayed] = storage.insert([new_job(run_at=None, delay_ms=5000)])
        [now] = storage.insert([new_job(run_at=None)])
        assert delayed.job.status is JobStatus.SCHEDULED and delayed.job.run_at == T0 + 5123
        assert now.job.status is JobStatus.PENDING and now.job.run_at == T0 + 123
        assert storage.get(delayed.job.id) == delayed.job
        assert [j.id for j in self.claim(storage)] == [now.job.id]
        clock.now = T0 + 5123
        [claimed] = self.claim(storage)
        assert claimed.id == delayed.job.id and claimed.claimed_at == T0 + 5123
        assert claimed.lease_expires_at == T0 + 5123 + LEASE

    def test_future_run_at_is_scheduled(self, storage: Storage) -> None:
        [inserted] = storage.insert([new_job(run_at=T0 + 5000)])
        assert inserted.job.status is JobStatus.SCHEDULED
        assert storage.next_due() == T0 + 5000

    def test_idempotency_key_dedups_unfinished_jobs_only(self, storage: Storage) -> None:
        first = storage.insert([new_job(idempotency_key="k")])[0]
        again = storage.insert([new_job(idempotency_key="k")])[0]
        other_type = storage.insert([new_job("other", idempotency_key="k")])[0]
        assert (first.created, again.created, other_type.created) == (True, False, True)
        assert again.job.id == first.job.id
        [claimed] = self.claim(storage, types=["noop"])
        storage.record([Completed(lease_of(claimed), None)])
        after = storage.insert([new_job(idempotency_key="k")])[0]
        assert after.created and after.job.id != first.job.id

    def test_transaction_rollback_discards_jobs_and_their_events(self, storage: Storage) -> None:
        job = new_job()
        before = storage.last_event_seq()
        with pytest.raises(RuntimeError), storage.transaction():
            storage.insert([job])
            raise RuntimeError("application failed")
        assert storage.get(job.id) is None
        assert storage.events_after(before) == []
        with storage.transaction():
            storage.insert([job])
        assert storage.get(job.id) is not None
        assert self.kinds(storage, job.id) == ["job:enqueued"]

    def test_after_commit_runs_only_on_commit(self, storage: Storage) -> None:
        seen: list[str] = []
        with pytest.raises(RuntimeError), storage.transaction():
            storage.after_commit(lambda: seen.append("rolled back"))
            raise RuntimeError
        with storage.transaction():
            storage.after_commit(lambda: seen.append("committed"))
            assert seen == []
        assert seen == ["committed"]

    # -- claim -------------------------------------------------------------

    def test_claim_order_is_priority_then_run_at_then_id(self, storage: Storage) -> None:
        low = new_job(priority=0, run_at=T0 - 10)
        high_late = new_job(priority=9, run_at=T0 - 1)
        high_early = new_job(priority=9, run_at=T0 - 5)
        same_a = new_job(priority=1, run_at=T0 - 3)
        same_b = new_job(priority=1, run_at=T0 - 3)
        storage.insert([low, high_late, high_early, same_b, same_a])
        claimed = self.claim(storage)
        assert [j.id for j in claimed] == [
            high_early.id,
            high_late.id,
            same_a.id,
            same_b.id,
            low.id,
        ]

    def test_claim_sets_lease_and_counts_the_attempt(self, storage: Storage) -> None:
        storage.insert([new_job()])
        [job] = self.claim(storage, worker="w9")
        assert job.status is JobStatus.CLAIMED
        assert (job.attempts, job.locked_by, job.claimed_at) == (1, "w9", T0)
        assert job.lease_expires_at == T0 + LEASE
        assert isinstance(job.lease_id, str) and len(job.lease_id) >= 16
        assert storage.get(job.id) == job
        assert self.claim(storage) == []

    def test_every_claim_makes_a_new_lease_id(self, storage: Storage) -> None:
        storage.insert([new_job(max_attempts=5) for _ in range(20)])
        first = self.claim(storage, limit=20)
        assert len({job.lease_id for job in first}) == 20
        storage.record([Released(lease_of(job)) for job in first])
        again = self.claim(storage, limit=20)
        assert not {job.lease_id for job in first} & {job.lease_id for job in again}
        lease = Lease.of(again[0])
        assert (lease.job_id, lease.lease_id, lease.worker) == (
            again[0].id,
            again[0].lease_id,
            "w1",
        )

    def test_claim_respects_limit_and_filters(self, storage: Storage) -> None:
        storage.insert([new_job(queue="a") for _ in range(3)] + [new_job("x", queue="b")])
        assert len(self.claim(storage, limit=2, queues=["a"])) == 2
        assert self.claim(storage, types=["noop"], queues=["b"]) == []
        [x] = self.claim(storage, types=["x"])
        assert x.type == "x"
        assert self.claim(storage, limit=0) == []

    def test_filtered_claims_keep_the_claim_order(self, storage: Storage) -> None:
        jobs = [
            new_job("x", queue="a", priority=1),
            new_job("y", queue="b", priority=5),
            new_job("x", queue="b", priority=3),
            new_job("y", queue="c", priority=9),
            new_job("x", queue="a", priority=7, run_at=T0 - 1),
        ]
        storage.insert(jobs)
        got = self.claim(storage, queues=["a", "b"], types=["x", "y"])
        assert [j.id for j in got] == [jobs[4].id, jobs[1].id, jobs[2].id, jobs[0].id]
        [c] = self.claim(storage, types=["y", "zzz"])
        assert c.id == jobs[3].id

    def test_scheduled_jobs_are_promoted_when_due(self, storage: Storage, clock: FakeClock) -> None:
        job = new_job(run_at=T0 + 1000, priority=100)
        storage.insert([job])
        clock.now = T0 + 999
        assert self.claim(storage) == []
        clock.now = T0 + 1000
        [claimed] = self.claim(storage)
        assert claimed.id == job.id

    def test_commit_batch_records_then_claims_in_one_transaction(
        self, storage: Storage, clock: FakeClock
    ) -> None:
        storage.insert([new_job(), new_job(), new_job(run_at=T0 + 50)])
        [first] = self.claim(storage, limit=1)
        clock.now = T0 + 10
        recorded, claimed = storage.commit_batch(
            [Completed(lease_of(first), 1)], worker="w1", claim_limit=5, lease_ms=LEASE
        )
        assert recorded[0].job is not None and recorded[0].job.status is JobStatus.COMPLETED
        assert recorded[0].state == "recorded"
        assert len(claimed) == 1 and claimed[0].id != first.id
        clock.now = T0 + 60
        _, none_due = storage.commit_batch(
            [], worker="w1", claim_limit=5, lease_ms=LEASE, promote=False
        )
        assert none_due == []  # the scheduled job is due but was not promoted
        _, promoted = storage.commit_batch([], worker="w1", claim_limit=5, lease_ms=LEASE)
        assert [job.run_at for job in promoted] == [T0 + 50]

    # -- the started marker ------------------------------------------------------

    def test_start_marks_only_the_jobs_that_start_at_once(
        self, storage: Storage, clock: FakeClock
    ) -> None:
        storage.insert([new_job(priority=3 - i) for i in range(4)])
        jobs = self.claim(storage, limit=4, start=1)
        assert [j.started_at for j in jobs] == [T0, None, None, None]
        assert [storage.get(j.id).started_at for j in jobs] == [T0, None, None, None]  # type: ignore[union-attr]
        clock.now = T0 + 7
        _, more = storage.commit_batch(
            [], worker="w1", claim_limit=1, lease_ms=LEASE, started=[lease_of(jobs[1])]
        )
        assert more == []
        assert storage.mark_started([lease_of(jobs[2])]) == {jobs[2].id}
        again = storage.mark_started([lease_of(jobs[2])])  # already marked: keeps the time
        assert again == {jobs[2].id}
        stale = Lease(jobs[3].id, "not-the-lease", "w1")
        assert storage.mark_started([stale]) == set()
        assert [storage.get(j.id).started_at for j in jobs] == [T0, T0 + 7, T0 + 7, None]  # type: ignore[union-attr]
        storage.insert([new_job(), new_job()])
        _, claimed = storage.commit_batch([], worker="w1", claim_limit=2, lease_ms=LEASE, start=0)
        assert [j.started_at for j in claimed] == [None, None]

    # -- owner transitions ------------------------------------------------------

    def test_complete_stores_result_and_children(self, storage: Storage, clock: FakeClock) -> None:
        job = self.one(storage)
        child = new_job(parent_id=job.id)
        clock.now = T0 + 5
        [rec] = storage.record([Completed(lease_of(job), {"ok": 1}, (child,))])
        assert rec.state == "recorded" and rec.job is not None
        assert rec.job.status is JobStatus.COMPLETED
        assert rec.job.result == {"ok": 1} and rec.job.completed_at == T0 + 5
        assert [c.job.id for c in rec.children] == [child.id]
        stored_child = storage.get(child.id)
        assert stored_child is not None and stored_child.parent_id == job.id
        assert stored_child.created_at == T0 + 5

    def test_stale_reports_change_nothing(self, storage: Storage, clock: FakeClock) -> None:
        storage.insert([new_job()])
        [job] = self.claim(storage, worker="w1")
        clock.now = T0 + LEASE + 1
        storage.sweep(force=True)  # lease expired: back to pending
        # the same worker id claims again: only the lease_id tells the claims apart
        [again] = self.claim(storage, worker="w1")
        assert again.attempts == 2 and again.lease_id != job.lease_id
        child = new_job()
        old = lease_of(job)
        stale: list[Outcome] = [
            Completed(old, "late", (child,)),
            Failed(old, "late"),
            Retrying(old, "late", 0),
            Released(old),
            Cancelled(old),
            Completed(Lease(job.id, "forged", "w1"), "forged"),
        ]
        answers = storage.record(stale)
        assert [(rec.state, rec.job) for rec in answers] == [("stale", None)] * len(stale)
        current = storage.get(job.id)
        assert current is not None and current.status is JobStatus.CLAIMED
        assert current.lease_id == again.lease_id and current.result is None
        assert storage.get(child.id) is None
        assert storage.extend_leases([old], lease_ms=LEASE) == {}

    @pytest.mark.parametrize("kind", ["completed", "retrying", "failed", "released", "cancelled"])
    def test_a_repeated_report_answers_already(self, storage: Storage, kind: str) -> None:
        job = self.one(storage)
        lease = lease_of(job)
        child = new_job(parent_id=job.id)
        choices: dict[str, Outcome] = {
            "completed": Completed(lease, {"r": 1}, (child,)),
            "retrying": Retrying(lease, "boom", 1000),
            "failed": Failed(lease, "bad"),
            "released": Released(lease),
            "cancelled": Cancelled(lease, "stop"),
        }
        outcome = choices[kind]
        [first] = storage.record([outcome])
        [second] = storage.record([outcome])
        assert first.state == "recorded" and second.state == "already"
        assert second.job == storage.get(job.id) == first.job
        assert second.children == ()
        assert len(storage.list_jobs(limit=10)) == (2 if kind == "completed" else 1)
        # a different outcome for the same lease is not "already": it is stale
        other: Outcome = Failed(lease, "x") if kind != "failed" else Completed(lease, None)
        [late] = storage.record([other])
        assert (late.state, late.job) == ("stale", None)

    def test_already_survives_a_later_claim(self, storage: Storage) -> None:
        job = self.one(storage)
        storage.record([Released(lease_of(job))])
        [again] = self.claim(storage, worker="w2")
        [rec] = storage.record([Released(lease_of(job))])
        assert rec.state == "already" and rec.job is not None
        assert rec.job.lease_id == again.lease_id and rec.job.status is JobStatus.CLAIMED

    def test_retry_is_relative_to_the_store_clock(self, storage: Storage, clock: FakeClock) -> None:
        job = self.one(storage)
        clock.now = T0 + 1
        [rec] = storage.record([Retrying(lease_of(job), "boom", 500)])
        assert rec.job is not None
        assert rec.job.status is JobStatus.SCHEDULED and rec.job.run_at == T0 + 501
        assert rec.job.last_error == "boom" and rec.job.locked_by is None
        assert rec.job.errors == [{"attempt": 1, "error": "boom", "worker": "w1", "at": T0 + 1}]
        clock.now = T0 + 500
        assert self.claim(storage) == []
        clock.now = T0 + 501
        [again] = self.claim(storage)
        assert again.attempts == 2

    def test_retry_due_now_is_pending(self, storage: Storage) -> None:
        job = self.one(storage)
        [rec] = storage.record([Retrying(lease_of(job), "e", 0)])
        assert rec.job is not None and rec.job.status is JobStatus.PENDING
        assert rec.job.run_at == T0

    def test_retry_delay_is_bounded(self, storage: Storage) -> None:
        storage.insert([new_job() for _ in range(3)])
        a, b, c = self.claim(storage)
        huge, negative, nan = storage.record(
            [
                Retrying(lease_of(a), "huge", 10**30),
                Retrying(lease_of(b), "negative", -5),
                Retrying(lease_of(c), "nan", float("nan")),  # type: ignore[arg-type]
            ]
        )
        assert huge.job is not None and huge.job.run_at == T0 + T.STORE_MAX_DELAY_MS
        assert negative.job is not None and negative.job.status is JobStatus.PENDING
        assert nan.job is not None and nan.job.run_at == T0
        for rec in (huge, negative, nan):
            assert rec.job == storage.get(rec.job.id)  # type: ignore[union-attr]

    def test_fail_release_and_cancel(self, storage: Storage, clock: FakeClock) -> None:
        storage.insert([new_job(), new_job(), new_job()])
        a, b, c = self.claim(storage)
        clock.now = T0 + 1
        failed, released, cancelled = storage.record(
            [Failed(lease_of(a), "bad"), Released(lease_of(b)), Cancelled(lease_of(c))]
        )
        assert failed.job is not None and failed.job.status is JobStatus.FAILED
        assert failed.job.errors[-1]["error"] == "bad" and failed.job.completed_at == T0 + 1
        assert released.job is not None and released.job.status is JobStatus.PENDING
        assert released.job.attempts == 0 and released.job.errors == []
        assert released.job.started_at is None and released.job.locked_by is None
        assert cancelled.job is not None and cancelled.job.status is JobStatus.CANCELLED

    def test_recorded_job_follows_the_table_with_or_without_the_claimed_row(
        self, storage: Storage, clock: FakeClock
    ) -> None:
        storage.insert([new_job(max_attempts=5) for _ in range(12)])
        claimed = self.claim(storage, limit=12)
        storage.cancel([claimed[5].id, claimed[11].id])  # requests: honoured below

        def outcomes(jobs: list[Job], with_job: bool) -> list[Outcome]:
            leases = [Lease(j.id, j.lease_id or "", "w1", j if with_job else None) for j in jobs]
            return [
                Completed(leases[0], {"n": [1, 2]}),
                Retrying(leases[1], "later", 999),
                Retrying(leases[2], "now", 0),
                Failed(leases[3], "bad"),
                Cancelled(leases[4], "stop"),
                Released(leases[5]),  # cancel requested: ends cancelled
            ]

        clock.now = T0 + 7
        for half, with_job in ((claimed[:6], True), (claimed[6:], False)):
            before = {job.id: storage.get(job.id) for job in half}
            for rec in storage.record(outcomes(half, with_job)):
                assert rec.job is not None and rec.state == "recorded"
                assert rec.job == storage.get(rec.job.id)
                prior = before[rec.job.id]
                assert prior is not None
                [rule] = [
                    t
                    for t in T.owner_transitions(rec.outcome)
                    if t.applies(prior, now=T0 + 7, lease_id=prior.lease_id)
                ]
                assert rec.job == T.apply(prior, rule, now=T0 + 7, outcome=rec.outcome)
        assert storage.get(claimed[5].id).status is JobStatus.CANCELLED  # type: ignore[union-attr]

    def test_extend_leases_reports_cancel_requests(
        self, storage: Storage, clock: FakeClock
    ) -> None:
        storage.insert([new_job(), new_job()])
        a, b = self.claim(storage)
        storage.cancel([b.id])
        clock.now = T0 + 10
        owned = storage.extend_leases([lease_of(a), lease_of(b)], lease_ms=LEASE)
        assert owned == {a.id: False, b.id: True}
        assert storage.cancel_requested("w1") == {b.id}
        refreshed = storage.get(a.id)
        assert refreshed is not None and refreshed.lease_expires_at == T0 + 10 + LEASE
        assert refreshed.heartbeat_at == T0 + 10

    # -- cancel requests are honoured by every later transition --------------------

    def test_cancel_request_honoured_by_release_and_retry(self, storage: Storage) -> None:
        storage.insert([new_job(), new_job()])
        a, b = self.claim(storage)
        storage.cancel([a.id, b.id])
        released, retried = storage.record([Released(lease_of(a)), Retrying(lease_of(b), "e", 0)])
        for rec, error in ((released, "cancelled"), (retried, "e")):
            assert rec.state == "recorded" and rec.job is not None
            assert rec.job.status is JobStatus.CANCELLED and rec.job.completed_at == T0
            assert rec.job.history[-1]["outcome"] == "cancelled"
            assert rec.job.history[-1]["error"] == error
            assert self.kinds(storage, rec.job.id)[-1] == "job:cancelled"
        assert released.job is not None and released.job.attempts == 0
        assert retried.job is not None and retried.job.errors[-1]["error"] == "e"
        assert self.claim(storage) == []  # neither runs again
        again = storage.record([Released(lease_of(a))])[0]
        assert again.state == "already"

    def test_complete_and_fail_win_over_a_cancel_request(self, storage: Storage) -> None:
        storage.insert([new_job(), new_job()])
        a, b = self.claim(storage)
        storage.cancel([a.id, b.id])
        done, failed = storage.record([Completed(lease_of(a), 1), Failed(lease_of(b), "x")])
        assert done.job is not None and done.job.status is JobStatus.COMPLETED
        assert failed.job is not None and failed.job.status is JobStatus.FAILED

    @pytest.mark.parametrize("started", [True, False])
    def test_cancel_request_honoured_by_the_sweep(
        self, storage: Storage, clock: FakeClock, started: bool
    ) -> None:
        storage.insert([new_job()])
        [job] = self.claim(storage, start=1 if started else 0)
        storage.cancel([job.id])
        clock.now = T0 + LEASE + 1
        [swept] = storage.sweep(force=True)
        assert swept.action == "cancelled" and swept.job.status is JobStatus.CANCELLED
        assert swept.job.history[-1]["outcome"] == "cancelled"
        assert self.claim(storage) == []

    # -- the sweep ------------------------------------------------------------------

    def test_sweep_reclaims_fails_and_cancels_expired_leases(
        self, storage: Storage, clock: FakeClock
    ) -> None:
        storage.insert([new_job(max_attempts=2), new_job(max_attempts=1), new_job(), new_job()])
        again, last, cancelled, live = self.claim(storage, limit=4)
        storage.cancel([cancelled.id])
        clock.now = T0 + LEASE
        storage.extend_leases([lease_of(live)], lease_ms=LEASE)
        clock.now = T0 + LEASE + 1
        swept = {item.job.id: item for item in storage.sweep(force=True)}
        assert set(swept) == {again.id, last.id, cancelled.id}
        assert swept[again.id].action == "reclaimed"
        assert swept[again.id].job.status is JobStatus.PENDING and swept[again.id].job.attempts == 1
        assert swept[again.id].job.errors[-1]["error"] == T.LEASE_EXPIRED
        assert swept[again.id].job.history[-1]["outcome"] == "reclaimed"
        assert swept[last.id].action == "failed" and swept[last.id].job.status is JobStatus.FAILED
        assert swept[cancelled.id].job.status is JobStatus.CANCELLED
        for item in swept.values():
            assert item.job == storage.get(item.job.id)
        assert storage.sweep(force=True) == []

    def test_sweep_gives_back_a_job_that_never_started(
        self, storage: Storage, clock: FakeClock
    ) -> None:
        storage.insert([new_job(max_attempts=1), new_job(max_attempts=1)])
        started, prefetched = self.claim(storage, limit=2, start=1)
        clock.now = T0 + LEASE + 1
        swept = {item.job.id: item for item in storage.sweep(force=True)}
        assert swept[started.id].action == "failed"
        gave_back = swept[prefetched.id]
        assert gave_back.action == "released"
        assert gave_back.job.status is JobStatus.PENDING and gave_back.job.attempts == 0
        assert gave_back.job.errors == [] and gave_back.job.last_error is None
        assert gave_back.job.history == [
            {
                "attempt": 1,
                "lease_id": prefetched.lease_id,
                "worker": "w1",
                "started_at": None,
                "ended_at": T0 + LEASE + 1,
                "outcome": "released",
                "error": None,
            }
        ]
        assert self.kinds(storage, prefetched.id)[-1] == "job:released"

    def test_a_job_that_kills_its_worker_ends_failed(
        self, storage: Storage, clock: FakeClock
    ) -> None:
        storage.insert([new_job(max_attempts=3)])
        for attempt in range(1, 4):
            [job] = self.claim(storage, limit=1, start=0)
            storage.mark_started([lease_of(job)])
            clock.advance(LEASE + 1)
            [swept] = storage.sweep(force=True)
            assert swept.job.attempts == attempt
        assert swept.action == "failed" and swept.job.status is JobStatus.FAILED
        assert [e["error"] for e in swept.job.errors] == [T.LEASE_EXPIRED] * 3
        assert [h["outcome"] for h in swept.job.history] == ["reclaimed", "reclaimed", "failed"]

    def test_only_one_sweeper_at_a_time(
        self, storage_factory: StorageFactory, clock: FakeClock
    ) -> None:
        a, b = storage_factory(clock), storage_factory(clock)
        a.insert([new_job(), new_job()])
        j1, j2 = self.claim(a, limit=2)
        assert b.acquire_lock("sweep", "someone-else", HOUR)
        assert not a.acquire_lock("sweep", "a-third", HOUR)
        clock.now = T0 + LEASE + 1
        assert a.sweep() == []  # held elsewhere
        assert a.get(j1.id).status is JobStatus.CLAIMED  # type: ignore[union-attr]
        assert {s.job.id for s in a.sweep(force=True)} == {j1.id, j2.id}
        assert b.sweep() == []  # a holds it now
        j3 = self.one(a)
        clock.now += 2 * HOUR  # a's hold has expired: b takes over
        assert [s.job.id for s in b.sweep()] == [j3.id]
        assert a.acquire_lock("hub", "h1", 5000) and a.acquire_lock("hub", "h1", 5000)
        a.release_lock("hub", "h1")
        assert b.acquire_lock("hub", "h2", 5000)

    # -- attempt history -------------------------------------------------------------

    def test_history_has_one_entry_per_ended_claim(
        self, storage: Storage, clock: FakeClock
    ) -> None:
        storage.insert([new_job(max_attempts=5)])
        [first] = self.claim(storage, worker="a")
        clock.now = T0 + 10
        storage.record([Retrying(lease_of(first), "boom", 0)])
        clock.now = T0 + 20
        [second] = self.claim(storage, worker="b", start=0)
        running = storage.get(second.id)
        assert running is not None
        assert running.attempts_detail()[-1] == {
            "attempt": 2,
            "lease_id": second.lease_id,
            "worker": "b",
            "started_at": None,
            "ended_at": None,
            "outcome": "running",
            "error": None,
        }
        clock.now = T0 + 30
        storage.mark_started([lease_of(second)])
        clock.now = T0 + 40
        [rec] = storage.record([Completed(lease_of(second), "ok")])
        assert rec.job is not None
        assert rec.job.history == [
            {
                "attempt": 1,
                "lease_id": first.lease_id,
                "worker": "a",
                "started_at": T0,
                "ended_at": T0 + 10,
                "outcome": "retrying",
                "error": "boom",
            },
            {
                "attempt": 2,
                "lease_id": second.lease_id,
                "worker": "b",
                "started_at": T0 + 30,
                "ended_at": T0 + 40,
                "outcome": "completed",
                "error": None,
            },
        ]
        assert rec.job.attempts_detail() == rec.job.history
        assert rec.job.errors == [{"attempt": 1, "error": "boom", "worker": "a", "at": T0 + 10}]
        assert storage.retry([rec.job.id]) == [None]  # completed: not retryable

    # -- events ---------------------------------------------------------------------

    def test_every_transition_appends_one_event(self, storage: Storage, clock: FakeClock) -> None:
        start = storage.last_event_seq()
        storage.insert([new_job(max_attempts=3) for _ in range(4)])
        a, b, c, d = self.claim(storage, limit=4, worker="wx")
        storage.record(
            [
                Completed(lease_of(a), 1),
                Retrying(lease_of(b), "e", 0),
                Failed(lease_of(c), "f"),
                Released(lease_of(d)),
            ]
        )
        storage.retry([c.id])
        [b2] = self.claim(storage, limit=1, types=["noop"])
        assert b2.id == b.id
        clock.now = T0 + LEASE + 1
        storage.sweep(force=True)
        storage.cancel([d.id])
        events = storage.events_after(start, 1000)
        assert [e.seq for e in events] == sorted({e.seq for e in events})
        assert all(e.seq > start for e in events)
        assert storage.last_event_seq() == events[-1].seq
        by_job = {job.id: [e.kind for e in events if e.job_id == job.id] for job in (a, b, c, d)}
        assert by_job[a.id] == ["job:enqueued", "job:claimed", "job:completed"]
        assert by_job[c.id] == ["job:enqueued", "job:claimed", "job:failed", "job:pending"]
        assert by_job[d.id] == ["job:enqueued", "job:claimed", "job:released", "job:cancelled"]
        assert by_job[b.id] == [
            "job:enqueued",
            "job:claimed",
            "job:retrying",
            "job:claimed",
            "job:reclaimed",
        ]
        claimed = [e for e in events if e.kind == "job:claimed"]
        assert {e.worker_id for e in claimed} == {"wx", "w1"}
        done = next(e for e in events if e.kind == "job:completed")
        assert (done.worker_id, done.at, done.job_id) == ("wx", T0, a.id)
        assert done.data is not None and done.data["type"] == "noop"
        failed = next(e for e in events if e.kind == "job:failed")
        assert failed.data is not None and failed.data["error"] == "f"

    def test_add_event_and_paging(self, storage: Storage, clock: FakeClock) -> None:
        first = storage.add_event("worker:registered", worker_id="w7", data={"host": "h"})
        second = storage.add_event("worker:lost", worker_id="w7")
        assert second > first and storage.last_event_seq() == second
        [e1] = storage.events_after(first - 1, limit=1)
        assert (e1.seq, e1.kind, e1.worker_id, e1.data, e1.at) == (
            first,
            "worker:registered",
            "w7",
            {"host": "h"},
            T0,
        )
        assert [e.kind for e in storage.events_after(first)] == ["worker:lost"]
        assert storage.events_after(second) == []
        with pytest.raises(StorageError):
            storage.add_event("")

    def test_sweep_prunes_old_events_and_seq_is_never_reused(
        self, storage: Storage, clock: FakeClock
    ) -> None:
        storage.insert([new_job() for _ in range(3)])
        last = storage.last_event_seq()
        clock.now = T0 + 2 * HOUR
        storage.sweep(force=True)
        assert storage.events_after(0) == []
        assert storage.last_event_seq() == last
        storage.insert([new_job()])
        [event] = storage.events_after(0)
        assert event.seq > last and event.at == T0 + 2 * HOUR
        clock.now = T0 + 2 * HOUR + HOUR // 2
        storage.sweep(force=True)
        assert storage.events_after(0) == [event]  # younger than the retention: kept

    # -- change notification ---------------------------------------------------------

    def test_wait_for_change_sees_another_handles_commit(
        self, storage_factory: StorageFactory, clock: FakeClock
    ) -> None:
        a, b = storage_factory(clock), storage_factory(clock)
        a.get("warm-up")
        assert a.wait_for_change(0) is False
        b.insert([new_job()])
        assert a.wait_for_change(5.0) is True
        assert a.wait_for_change(0.01) is False
        ready = threading.Event()
        answer: list[bool] = []
        elapsed: list[float] = []

        def waiter() -> None:
            a.get("warm-up")  # this thread's connection exists before the commit
            ready.set()
            began = time.monotonic()
            answer.append(a.wait_for_change(30.0))
            elapsed.append(time.monotonic() - began)

        thread = threading.Thread(target=waiter)
        thread.start()
        assert ready.wait(10)
        b.insert([new_job()])
        thread.join(30)
        assert answer == [True] and elapsed[0] < 25

    # -- operators ----------------------------------------------------------

    def test_operator_retry_resets_attempts_and_keeps_history(self, storage: Storage) -> None:
        storage.insert([new_job(), new_job()])
        a, b = self.claim(storage)
        storage.record([Failed(lease_of(a), "x")])
        [retried, not_failed] = storage.retry([a.id, b.id])
        assert retried is not None and not_failed is None
        assert retried.status is JobStatus.PENDING and retried.attempts == 0
        assert retried.errors[-1]["error"] == "x" and retried.history[-1]["outcome"] == "failed"
        assert retried.completed_at is None and not retried.cancel_requested
        assert storage.failed_ids() == []
        assert self.kinds(storage, a.id)[-1] == "job:pending"

    def test_operator_retry_refuses_to_duplicate_a_live_key(self, storage: Storage) -> None:
        storage.insert([new_job(idempotency_key="k")])
        [a] = self.claim(storage)
        storage.record([Failed(lease_of(a), "x")])
        storage.insert([new_job(idempotency_key="k")])
        with pytest.raises(IllegalTransition, match="idempotency key"):
            storage.retry([a.id])

    def test_cancel_waiting_and_running(self, storage: Storage) -> None:
        storage.insert([new_job(), new_job(run_at=T0 + 10_000), new_job()])
        [running] = self.claim(storage, limit=1)
        ids = [job.id for job in storage.list_jobs(limit=10)]
        results = {job.id: job for job in storage.cancel(ids) if job is not None}
        assert (
            results[running.id].status is JobStatus.CLAIMED and results[running.id].cancel_requested
        )
        assert sum(job.status is JobStatus.CANCELLED for job in results.values()) == 2
        assert storage.cancel([ids[-1]]) in ([None], [results[ids[-1]]])

    def test_list_filters_newest_first(self, storage: Storage) -> None:
        jobs = [new_job(), new_job("x"), new_job(queue="q")]
        storage.insert(jobs)
        assert [j.id for j in storage.list_jobs()] == [j.id for j in reversed(jobs)]
        assert [j.type for j in storage.list_jobs(types=["x"])] == ["x"]
        assert [j.queue for j in storage.list_jobs(queues=["q"])] == ["q"]
        assert storage.list_jobs(statuses=["failed"]) == []
        assert len(storage.list_jobs(limit=2)) == 2

    def test_prune_deletes_only_old_finished_jobs(self, storage: Storage, clock: FakeClock) -> None:
        storage.insert([new_job(), new_job(), new_job()])
        old, recent = self.claim(storage, limit=2)
        storage.record([Completed(lease_of(old), None)])
        clock.now = T0 + 10_000
        storage.record([Completed(lease_of(recent), None)])
        assert storage.prune(before=T0 + 5000) == 1
        assert storage.get(old.id) is None and storage.get(recent.id) is not None
        assert len(storage.list_jobs()) == 2

    def test_scan_iterates_in_batches(self, storage: Storage) -> None:
        storage.insert([new_job() for _ in range(7)] + [new_job("x")])
        claimed = self.claim(storage, limit=7, types=["noop"])
        storage.record([Completed(lease_of(j), None) for j in claimed])
        done = storage.scan(statuses=["completed"], batch=3)
        assert [j.id for j in done] == sorted(j.id for j in claimed)
        assert [j.type for j in storage.scan(types=["x"])] == ["x"]
        assert storage.count_by_status() == {"completed": 7, "pending": 1}

    def test_list_finished_after_and_prune_by_status_and_type(
        self, storage: Storage, clock: FakeClock
    ) -> None:
        storage.insert([new_job(), new_job(), new_job("x")])
        a, b, x = self.claim(storage, limit=3)
        storage.record([Failed(lease_of(a), "e"), Completed(lease_of(x), None)])
        clock.now = T0 + 100
        storage.record([Failed(lease_of(b), "e")])
        assert [j.id for j in storage.list_jobs(statuses=["failed"], finished_after=T0 + 50)] == [
            b.id
        ]
        assert storage.prune(before=T0 + 1000, statuses=["failed"], types=["noop"]) == 2
        assert [j.id for j in storage.list_jobs()] == [x.id]

    def test_stats(self, storage: Storage, clock: FakeClock) -> None:
        storage.insert([new_job(), new_job(), new_job("x", idempotency_key="k")])
        clock.now = T0 + 100
        a, b, x = self.claim(storage, limit=3)
        clock.now = T0 + 300
        storage.record([Completed(lease_of(a), None), Failed(lease_of(b), "E1")])
        clock.now = T0 + LEASE + 101
        stats = storage.stats()
        assert stats.counts == {"completed": 1, "failed": 1, "claimed": 1}
        assert stats.by_type == {"noop": {"completed": 1, "failed": 1}, "x": {"claimed": 1}}
        assert stats.failures == [{"type": "noop", "error": "E1", "count": 1}]
        assert [job.id for job in stats.stuck] == [x.id]
        assert stats.durations == {"noop": {"count": 1, "p50_ms": 200, "p95_ms": 200}}
        assert stats.last_hour == {"enqueued": 3, "completed": 1, "failed": 1}
        assert stats.duplicates == []

    # -- beside other connections ------------------------------------------------------

    def test_reads_and_opening_work_while_another_connection_writes(
        self, storage: Storage, storage_factory: StorageFactory, app_connection: AppConnection
    ) -> None:
        storage.insert([new_job()])
        app_connection.execute("CREATE TABLE IF NOT EXISTS app_marks (id TEXT PRIMARY KEY)")
        app_connection.begin()
        app_connection.execute("INSERT INTO app_marks (id) VALUES ('m1')")
        done: list[Any] = []
        try:

            def read() -> None:
                fresh = storage_factory()  # opening (and migrate) must not need the lock
                done.append(
                    (
                        len(fresh.list_jobs()),
                        fresh.count_by_status(),
                        fresh.stats().counts,
                        len(fresh.events_after(0)),
                    )
                )

            thread = threading.Thread(target=read)
            thread.start()
            thread.join(20)
            assert done == [(1, {"pending": 1}, {"pending": 1}, 1)]
        finally:
            app_connection.rollback()

    def test_writes_blocked_by_another_writer_raise_storage_busy(
        self, busy_storage: Storage, app_connection: AppConnection
    ) -> None:
        busy_storage.get("warm-up")
        app_connection.begin()
        try:
            with pytest.raises(StorageBusy):
                busy_storage.insert([new_job()])
        finally:
            app_connection.rollback()
        busy_storage.insert([new_job()])  # and it recovers

    def test_outbox_on_the_applications_own_connection(
        self, storage: Storage, app_connection: AppConnection
    ) -> None:
        app_connection.execute("CREATE TABLE IF NOT EXISTS app_orders (id TEXT PRIMARY KEY)")
        seen: list[str] = []
        rolled_back, committed = new_job(), new_job()
        for job, finish in (
            (rolled_back, app_connection.rollback),
            (committed, app_connection.commit),
        ):
            app_connection.begin()
            app_connection.execute(f"INSERT INTO app_orders (id) VALUES ('{job.id}')")
            [inserted] = storage.insert([job], conn=app_connection.raw)
            assert inserted.created and inserted.job.id == job.id
            storage.after_commit(partial(seen.append, job.id), conn=app_connection.raw)
            finish()
        assert storage.get(rolled_back.id) is None
        assert storage.get(committed.id) is not None
        assert app_connection.scalar("SELECT count(*) FROM app_orders") == 1
        assert seen == [committed.id]
        assert self.kinds(storage, committed.id) == ["job:enqueued"]
        assert self.kinds(storage, rolled_back.id) == []
        with pytest.raises(StorageError, match="transaction"):
            storage.insert([new_job()], conn=app_connection.raw)  # none open

    # -- concurrency ---------------------------------------------------------

    @pytest.mark.stress
    def test_concurrent_claimers_claim_each_job_once(self, storage: Storage) -> None:
        total = 600
        storage.insert([new_job() for _ in range(total)])
        claimed: list[str] = []
        lock = threading.Lock()
        errors: list[BaseException] = []

        def claimer(name: str) -> None:
            try:
                while True:
                    jobs = self.claim(storage, limit=7, worker=name)
                    if not jobs:
                        return
                    answers = storage.record([Completed(lease_of(j), name) for j in jobs])
                    assert all(a.state == "recorded" for a in answers)
                    with lock:
                        claimed.extend(j.id for j in jobs)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=claimer, args=(f"w{i}",)) for i in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert len(claimed) == total and len(set(claimed)) == total
        assert all(job.attempts == 1 for job in storage.scan(statuses=["completed"]))

    @pytest.mark.stress
    def test_racing_reports_of_one_lease_record_once(
        self, storage_factory: StorageFactory, clock: FakeClock
    ) -> None:
        handles = [storage_factory(clock) for _ in range(4)]
        handles[0].insert([new_job() for _ in range(30)])
        jobs = self.claim(handles[0], limit=30)
        answers: list[str] = []
        lock = threading.Lock()

        def report(storage: Storage) -> None:
            for rec in storage.record([Completed(lease_of(j), 1) for j in jobs]):
                with lock:
                    answers.append(rec.state)

        threads = [threading.Thread(target=report, args=(h,)) for h in handles]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert answers.count("recorded") == 30 and answers.count("already") == 90
        done = [e for e in handles[0].events_after(0, 10_000) if e.kind == "job:completed"]
        assert len(done) == 30
