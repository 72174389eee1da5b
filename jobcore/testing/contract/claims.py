"""Enqueue, claims and the started marker."""

from __future__ import annotations

import pytest

from jobcore.models import (
    Completed,
    JobStatus,
    Lease,
    Released,
)
from jobcore.storage.base import Storage
from jobcore.testing.contract.base import (
    LEASE,
    T0,
    ContractBase,
    FakeClock,
    lease_of,
    new_job,
)


class ClaimRules(ContractBase):
    """Enqueue, claims and the started marker."""

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

    def test_filtered_claims_find_matches_behind_many_other_rows(self, storage: Storage) -> None:
        first = new_job("x", priority=9)
        crowd = [new_job("z", queue="busy", priority=5) for _ in range(300)]
        late_y, late_x = new_job("y", priority=1), new_job("x", queue="q2", priority=0)
        storage.insert([first, *crowd, late_y, late_x])
        got = self.claim(storage, limit=3, types=["x", "y"])
        assert [j.id for j in got] == [first.id, late_y.id, late_x.id]
        storage.insert([new_job("y", queue="q2"), new_job("x", queue="q3")])
        got = self.claim(storage, limit=5, queues=["q2", "q3", "default"])
        assert sorted(j.queue for j in got) == ["q2", "q3"]
        assert all(j.type != "z" for j in got)

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
