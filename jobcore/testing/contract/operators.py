"""Operator transitions, reads, other connections and concurrency."""

from __future__ import annotations

import threading
from functools import partial
from typing import Any

import pytest

from jobcore.errors import IllegalTransition, StorageBusy, StorageError
from jobcore.models import (
    Completed,
    Failed,
    JobStatus,
)
from jobcore.storage.base import Storage
from jobcore.testing.contract.base import (
    LEASE,
    T0,
    AppConnection,
    ContractBase,
    FakeClock,
    StorageFactory,
    lease_of,
    new_job,
)


class OperatorRules(ContractBase):
    """Operator transitions, reads, other connections and concurrency."""

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
