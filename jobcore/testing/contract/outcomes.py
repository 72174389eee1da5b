"""Owner transitions: fencing by lease_id, already vs stale, cancel requests."""

from __future__ import annotations

import pytest

from jobcore import transitions as T
from jobcore.models import (
    Cancelled,
    Completed,
    Failed,
    Job,
    JobStatus,
    Lease,
    Outcome,
    Released,
    Retrying,
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


class OutcomeRules(ContractBase):
    """Owner transitions: fencing by lease_id, already vs stale, cancel requests."""

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

    def test_another_worker_with_the_lease_id_changes_nothing(self, storage: Storage) -> None:
        # the lease id is no secret (readers see it): the fence is the lease and the worker
        job = self.one(storage)
        assert job.lease_id is not None and job.locked_by != "w2"
        forged = Lease(job.id, job.lease_id, "w2")
        assert storage.extend_leases([forged], lease_ms=LEASE) == {}
        assert storage.mark_started([forged]) == set()
        answers = storage.record(
            [Completed(forged, "forged"), Failed(forged, "x"), Released(forged)]
        )
        assert [(rec.state, rec.job) for rec in answers] == [("stale", None)] * 3
        assert storage.get(job.id) == job
        [done] = storage.record([Completed(lease_of(job), "ok")])
        assert done.state == "recorded"
        [repeat] = storage.record([Completed(forged, "ok")])  # not w2's outcome to repeat
        assert (repeat.state, repeat.job) == ("stale", None)

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
                    if t.applies(prior, now=T0 + 7, lease_id=prior.lease_id, worker=prior.locked_by)
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
