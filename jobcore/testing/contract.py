"""`StorageContract`: the conformance suite every storage backend must pass.

Subclass it in a test module and provide a `storage` fixture returning a
fresh, migrated, empty backend::

    class TestMyBackend(StorageContract):
        @pytest.fixture
        def storage(self, tmp_path):
            return MyBackend(...)

Times are passed explicitly, so the suite never sleeps.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from jobcore.errors import IllegalTransition
from jobcore.ids import new_id
from jobcore.models import (
    Cancelled,
    Completed,
    Failed,
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


def lease_of(job: Any, worker: str = "w1") -> Lease:
    return Lease(job_id=job.id, worker=worker, attempt=job.attempts)


class StorageContract:
    """Conformance tests; subclasses provide the `storage` fixture."""

    def claim(
        self, storage: Storage, limit: int = 10, now: int = T0, worker: str = "w1", **kw: Any
    ) -> list[Any]:
        return storage.claim(worker=worker, limit=limit, now=now, lease_ms=LEASE, **kw)

    # -- enqueue ------------------------------------------------------------

    def test_insert_and_get_round_trip(self, storage: Storage) -> None:
        job = new_job(payload={"a": [1, "x"]}, meta={"trace": "t"}, priority=5, timeout_ms=1500)
        [inserted] = storage.insert([job], T0)
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

    def test_future_run_at_is_scheduled(self, storage: Storage) -> None:
        [inserted] = storage.insert([new_job(run_at=T0 + 5000)], T0)
        assert inserted.job.status is JobStatus.SCHEDULED
        assert storage.next_due() == T0 + 5000

    def test_idempotency_key_dedups_unfinished_jobs_only(self, storage: Storage) -> None:
        first = storage.insert([new_job(idempotency_key="k")], T0)[0]
        again = storage.insert([new_job(idempotency_key="k")], T0)[0]
        other_type = storage.insert([new_job("other", idempotency_key="k")], T0)[0]
        assert (first.created, again.created, other_type.created) == (True, False, True)
        assert again.job.id == first.job.id
        [claimed] = self.claim(storage, types=["noop"])
        storage.record([Completed(lease=lease_of(claimed), result=None)], now=T0)
        after = storage.insert([new_job(idempotency_key="k")], T0)[0]
        assert after.created and after.job.id != first.job.id

    def test_transaction_rollback_discards_jobs(self, storage: Storage) -> None:
        job = new_job()
        with pytest.raises(RuntimeError), storage.transaction():
            storage.insert([job], T0)
            raise RuntimeError("application failed")
        assert storage.get(job.id) is None
        with storage.transaction():
            storage.insert([job], T0)
        assert storage.get(job.id) is not None

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
        storage.insert([low, high_late, high_early, same_b, same_a], T0)
        claimed = self.claim(storage)
        assert [j.id for j in claimed] == [
            high_early.id,
            high_late.id,
            same_a.id,
            same_b.id,
            low.id,
        ]

    def test_claim_sets_lease_and_counts_the_attempt(self, storage: Storage) -> None:
        storage.insert([new_job()], T0)
        [job] = self.claim(storage, worker="w9")
        assert job.status is JobStatus.CLAIMED
        assert (job.attempts, job.locked_by, job.claimed_at) == (1, "w9", T0)
        assert job.lease_expires_at == T0 + LEASE
        assert self.claim(storage) == []

    def test_claim_respects_limit_and_filters(self, storage: Storage) -> None:
        storage.insert([new_job(queue="a") for _ in range(3)] + [new_job("x", queue="b")], T0)
        assert len(self.claim(storage, limit=2, queues=["a"])) == 2
        assert self.claim(storage, types=["noop"], queues=["b"]) == []
        [x] = self.claim(storage, types=["x"])
        assert x.type == "x"

    def test_scheduled_jobs_are_promoted_when_due(self, storage: Storage) -> None:
        job = new_job(run_at=T0 + 1000, priority=100)
        storage.insert([job], T0)
        assert self.claim(storage, now=T0 + 999) == []
        [claimed] = self.claim(storage, now=T0 + 1000)
        assert claimed.id == job.id

    def test_commit_batch_records_then_claims_in_one_transaction(self, storage: Storage) -> None:
        storage.insert([new_job(), new_job(), new_job(run_at=T0 + 50)], T0)
        [first] = self.claim(storage, limit=1)
        recorded, claimed = storage.commit_batch(
            [Completed(lease=lease_of(first), result=1)],
            worker="w1",
            claim_limit=5,
            now=T0 + 10,
            lease_ms=LEASE,
        )
        assert recorded[0].job is not None and recorded[0].job.status is JobStatus.COMPLETED
        assert len(claimed) == 1 and claimed[0].id != first.id
        _, none_due = storage.commit_batch(
            [], worker="w1", claim_limit=5, now=T0 + 60, lease_ms=LEASE, promote=False
        )
        assert none_due == []  # the scheduled job is due but was not promoted
        _, promoted = storage.commit_batch(
            [], worker="w1", claim_limit=5, now=T0 + 60, lease_ms=LEASE
        )
        assert [job.run_at for job in promoted] == [T0 + 50]

    # -- owner transitions ------------------------------------------------------

    def test_complete_stores_result_and_children(self, storage: Storage) -> None:
        storage.insert([new_job()], T0)
        [job] = self.claim(storage)
        child = new_job(parent_id=job.id)
        [rec] = storage.record(
            [Completed(lease=lease_of(job), result={"ok": 1}, children=(child,))], now=T0 + 5
        )
        assert rec.job is not None and rec.job.status is JobStatus.COMPLETED
        assert rec.job.result == {"ok": 1} and rec.job.completed_at == T0 + 5
        stored_child = storage.get(child.id)
        assert stored_child is not None and stored_child.parent_id == job.id

    def test_stale_reports_change_nothing(self, storage: Storage) -> None:
        storage.insert([new_job()], T0)
        [job] = self.claim(storage, worker="old")
        storage.sweep(now=T0 + LEASE + 1)  # lease expired: back to pending
        [again] = self.claim(storage, worker="new", now=T0 + LEASE + 2)
        assert again.attempts == 2
        child = new_job()
        stale: list[Outcome] = [
            Completed(lease=lease_of(job, "old"), result="late", children=(child,)),
            Failed(lease=lease_of(job, "old"), error="late"),
            Retrying(lease=lease_of(job, "old"), error="late", run_at=T0),
            Released(lease=lease_of(job, "old")),
            Cancelled(lease=lease_of(job, "old")),
            Completed(lease=Lease(job_id=job.id, worker="new", attempt=1), result="wrong attempt"),
        ]
        assert all(rec.job is None for rec in storage.record(stale, now=T0 + LEASE + 3))
        current = storage.get(job.id)
        assert current is not None and current.status is JobStatus.CLAIMED
        assert current.locked_by == "new" and current.result is None
        assert storage.get(child.id) is None
        assert storage.extend_leases([lease_of(job, "old")], now=T0, lease_ms=LEASE) == {}

    def test_retry_later_appends_history(self, storage: Storage) -> None:
        storage.insert([new_job()], T0)
        [job] = self.claim(storage)
        [rec] = storage.record(
            [Retrying(lease=lease_of(job), error="boom", run_at=T0 + 500)], now=T0 + 1
        )
        assert rec.job is not None
        assert rec.job.status is JobStatus.SCHEDULED and rec.job.run_at == T0 + 500
        assert rec.job.last_error == "boom" and rec.job.locked_by is None
        assert rec.job.errors == [{"attempt": 1, "error": "boom", "worker": "w1", "at": T0 + 1}]
        [again] = self.claim(storage, now=T0 + 500)
        assert again.attempts == 2

    def test_retry_due_now_is_pending(self, storage: Storage) -> None:
        storage.insert([new_job()], T0)
        [job] = self.claim(storage)
        [rec] = storage.record([Retrying(lease=lease_of(job), error="e", run_at=T0)], now=T0)
        assert rec.job is not None and rec.job.status is JobStatus.PENDING

    def test_fail_release_and_cancel(self, storage: Storage) -> None:
        storage.insert([new_job(), new_job(), new_job()], T0)
        a, b, c = self.claim(storage)
        failed, released, cancelled = storage.record(
            [
                Failed(lease=lease_of(a), error="bad"),
                Released(lease=lease_of(b)),
                Cancelled(lease=lease_of(c)),
            ],
            now=T0 + 1,
        )
        assert failed.job is not None and failed.job.status is JobStatus.FAILED
        assert failed.job.errors[-1]["error"] == "bad" and failed.job.completed_at == T0 + 1
        assert released.job is not None and released.job.status is JobStatus.PENDING
        assert released.job.attempts == 0 and released.job.errors == []
        assert cancelled.job is not None and cancelled.job.status is JobStatus.CANCELLED

    def test_recorded_job_equals_the_stored_row_with_or_without_the_claimed_row(
        self, storage: Storage
    ) -> None:
        storage.insert([new_job(max_attempts=5) for _ in range(10)], T0)
        claimed = self.claim(storage, limit=10)

        def outcomes(jobs: list[Any], with_job: bool) -> list[Outcome]:
            leases = [
                Lease(job_id=j.id, worker="w1", attempt=j.attempts, job=j if with_job else None)
                for j in jobs
            ]
            return [
                Completed(lease=leases[0], result={"n": [1, 2]}),
                Retrying(lease=leases[1], error="later", run_at=T0 + 999),
                Retrying(lease=leases[2], error="now", run_at=T0),
                Failed(lease=leases[3], error="bad"),
                Cancelled(lease=leases[4], error="stop"),
            ]

        for half, with_job in ((claimed[:5], True), (claimed[5:], False)):
            for rec in storage.record(outcomes(half, with_job), now=T0 + 7):
                assert rec.job is not None
                assert rec.job == storage.get(rec.job.id)
        [again] = self.claim(storage, limit=1, now=T0 + 10, types=["noop"])
        [released] = storage.record(
            [
                Released(
                    lease=Lease(job_id=again.id, worker="w1", attempt=again.attempts, job=again)
                )
            ],
            now=T0 + 11,
        )
        assert released.job == storage.get(again.id)

    def test_extend_leases_reports_cancel_requests(self, storage: Storage) -> None:
        storage.insert([new_job(), new_job()], T0)
        a, b = self.claim(storage)
        storage.cancel([b.id], now=T0)
        owned = storage.extend_leases([lease_of(a), lease_of(b)], now=T0 + 10, lease_ms=LEASE)
        assert owned == {a.id: False, b.id: True}
        assert storage.cancel_requested("w1") == {b.id}
        refreshed = storage.get(a.id)
        assert refreshed is not None and refreshed.lease_expires_at == T0 + 10 + LEASE

    # -- sweep --------------------------------------------------------------

    def test_sweep_reclaims_fails_and_cancels_expired_leases(self, storage: Storage) -> None:
        storage.insert([new_job(max_attempts=2), new_job(max_attempts=1), new_job(), new_job()], T0)
        again, last, cancelled, live = self.claim(storage, limit=4)
        storage.cancel([cancelled.id], now=T0)
        storage.extend_leases([lease_of(live)], now=T0 + LEASE, lease_ms=LEASE)
        swept = {item.job.id: item for item in storage.sweep(now=T0 + LEASE + 1)}
        assert set(swept) == {again.id, last.id, cancelled.id}
        assert swept[again.id].action == "reclaimed"
        assert swept[again.id].job.status is JobStatus.PENDING and swept[again.id].job.attempts == 1
        assert swept[again.id].job.errors[-1]["error"] == "lease expired"
        assert swept[last.id].action == "failed" and swept[last.id].job.status is JobStatus.FAILED
        assert swept[cancelled.id].job.status is JobStatus.CANCELLED
        assert storage.sweep(now=T0 + LEASE + 2) == []

    # -- operators ----------------------------------------------------------

    def test_operator_retry_resets_attempts_and_keeps_history(self, storage: Storage) -> None:
        storage.insert([new_job(), new_job()], T0)
        a, b = self.claim(storage)
        storage.record([Failed(lease=lease_of(a), error="x")], now=T0)
        [retried, not_failed] = storage.retry([a.id, b.id], now=T0 + 1)
        assert retried is not None and not_failed is None
        assert retried.status is JobStatus.PENDING and retried.attempts == 0
        assert retried.errors[-1]["error"] == "x"
        assert storage.failed_ids() == []

    def test_operator_retry_refuses_to_duplicate_a_live_key(self, storage: Storage) -> None:
        storage.insert([new_job(idempotency_key="k")], T0)
        [a] = self.claim(storage)
        storage.record([Failed(lease=lease_of(a), error="x")], now=T0)
        storage.insert([new_job(idempotency_key="k")], T0)
        with pytest.raises(IllegalTransition, match="idempotency key"):
            storage.retry([a.id], now=T0)

    def test_cancel_waiting_and_running(self, storage: Storage) -> None:
        storage.insert([new_job(), new_job(run_at=T0 + 10_000), new_job()], T0)
        [running] = self.claim(storage, limit=1)
        ids = [job.id for job in storage.list_jobs(limit=10)]
        results = {job.id: job for job in storage.cancel(ids, now=T0) if job is not None}
        assert (
            results[running.id].status is JobStatus.CLAIMED and results[running.id].cancel_requested
        )
        assert sum(job.status is JobStatus.CANCELLED for job in results.values()) == 2
        assert storage.cancel([ids[-1]], now=T0) in ([None], [results[ids[-1]]])

    def test_list_filters_newest_first(self, storage: Storage) -> None:
        jobs = [new_job(), new_job("x"), new_job(queue="q")]
        storage.insert(jobs, T0)
        assert [j.id for j in storage.list_jobs()] == [j.id for j in reversed(jobs)]
        assert [j.type for j in storage.list_jobs(types=["x"])] == ["x"]
        assert [j.queue for j in storage.list_jobs(queues=["q"])] == ["q"]
        assert storage.list_jobs(statuses=["failed"]) == []
        assert len(storage.list_jobs(limit=2)) == 2

    def test_prune_deletes_only_old_finished_jobs(self, storage: Storage) -> None:
        storage.insert([new_job(), new_job(), new_job()], T0)
        old, recent = self.claim(storage, limit=2)
        storage.record([Completed(lease=lease_of(old), result=None)], now=T0)
        storage.record([Completed(lease=lease_of(recent), result=None)], now=T0 + 10_000)
        assert storage.prune(before=T0 + 5000) == 1
        assert storage.get(old.id) is None and storage.get(recent.id) is not None
        assert len(storage.list_jobs()) == 2

    def test_scan_iterates_in_batches(self, storage: Storage) -> None:
        storage.insert([new_job() for _ in range(7)] + [new_job("x")], T0)
        claimed = self.claim(storage, limit=7, types=["noop"])
        storage.record([Completed(lease=lease_of(j), result=None) for j in claimed], now=T0)
        done = storage.scan(statuses=["completed"], batch=3)
        assert [j.id for j in done] == sorted(j.id for j in claimed)
        assert [j.type for j in storage.scan(types=["x"])] == ["x"]
        assert storage.count_by_status() == {"completed": 7, "pending": 1}

    def test_list_finished_after_and_prune_by_status_and_type(self, storage: Storage) -> None:
        storage.insert([new_job(), new_job(), new_job("x")], T0)
        a, b, x = self.claim(storage, limit=3)
        storage.record([Failed(lease=lease_of(a), error="e")], now=T0)
        storage.record([Failed(lease=lease_of(b), error="e")], now=T0 + 100)
        storage.record([Completed(lease=lease_of(x), result=None)], now=T0)
        assert [j.id for j in storage.list_jobs(statuses=["failed"], finished_after=T0 + 50)] == [
            b.id
        ]
        assert storage.prune(before=T0 + 1000, statuses=["failed"], types=["noop"]) == 2
        assert [j.id for j in storage.list_jobs()] == [x.id]

    def test_stats(self, storage: Storage) -> None:
        storage.insert([new_job(), new_job(), new_job("x", idempotency_key="k")], T0)
        a, b, x = self.claim(storage, limit=3, now=T0 + 100)
        storage.record(
            [Completed(lease=lease_of(a), result=None), Failed(lease=lease_of(b), error="E1")],
            now=T0 + 300,
        )
        stats = storage.stats(now=T0 + LEASE + 101)
        assert stats.counts == {"completed": 1, "failed": 1, "claimed": 1}
        assert stats.by_type == {"noop": {"completed": 1, "failed": 1}, "x": {"claimed": 1}}
        assert stats.failures == [{"type": "noop", "error": "E1", "count": 1}]
        assert [job.id for job in stats.stuck] == [x.id]
        assert stats.durations == {"noop": {"count": 1, "p50_ms": 200, "p95_ms": 200}}
        assert stats.last_hour == {"enqueued": 3, "completed": 1, "failed": 1}
        assert stats.duplicates == []

    # -- concurrency ---------------------------------------------------------

    @pytest.mark.stress
    def test_concurrent_claimers_claim_each_job_once(self, storage: Storage) -> None:
        total = 600
        storage.insert([new_job() for _ in range(total)], T0)
        claimed: list[str] = []
        lock = threading.Lock()
        errors: list[BaseException] = []

        def claimer(name: str) -> None:
            try:
                while True:
                    jobs = self.claim(storage, limit=7, worker=name)
                    if not jobs:
                        return
                    storage.record(
                        [Completed(lease=lease_of(j, name), result=name) for j in jobs], now=T0
                    )
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
