"""The sweep, the single sweeper, attempt history, events, change notification."""

from __future__ import annotations

import threading
import time

import pytest

from jobcore import transitions as T
from jobcore.errors import StorageError
from jobcore.models import (
    Completed,
    Failed,
    JobStatus,
    Released,
    Retrying,
)
from jobcore.storage.base import Claim, Storage
from jobcore.testing.contract.base import (
    HOUR,
    LEASE,
    T0,
    ContractBase,
    FakeClock,
    StorageFactory,
    lease_of,
    new_job,
)


class SweepAndEventRules(ContractBase):
    """The sweep, the single sweeper, attempt history, events, change notification."""

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

    def test_sweep_only_listed_claims_still_unchanged(
        self, storage: Storage, clock: FakeClock
    ) -> None:
        """`only`: a one-shot sweeper's confirmed look. A claim extended, re-claimed or
        not listed since is left alone; an unlisted expired one too."""
        storage.insert([new_job() for _ in range(5)])
        dead, live, other_lease, other_expiry, unlisted = self.claim(storage, limit=5)
        clock.now = T0 + LEASE + 1
        looked = [Claim(j.id, str(j.lease_id), T0 + LEASE) for j in (dead, live)]
        storage.extend_leases([lease_of(live)], lease_ms=LEASE)  # a live worker, after the look
        looked += [
            Claim(other_lease.id, "another lease", T0 + LEASE),
            Claim(other_expiry.id, str(other_expiry.lease_id), T0 + LEASE - 1),
        ]
        swept = storage.sweep(force=True, only=looked)
        assert [(item.job.id, item.action) for item in swept] == [(dead.id, "reclaimed")]
        assert storage.sweep(force=True, only=[]) == []
        left = {item.job.id for item in storage.sweep(force=True)}
        assert left == {other_lease.id, other_expiry.id, unlisted.id}

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
        assert (failed.job_id, failed.worker_id) == (c.id, "wx")

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
        # older than the retention (default 1h): gone, except that a backend may keep the
        # newest row to remember where seq stands
        assert [e.seq for e in storage.events_after(0)] in ([], [last])
        assert storage.last_event_seq() == last
        storage.insert([new_job()])
        event = storage.events_after(0)[-1]
        assert event.seq > last and event.at == T0 + 2 * HOUR
        clock.now = T0 + 2 * HOUR + HOUR // 2
        storage.sweep(force=True)
        assert storage.events_after(0)[-1:] == [event]  # younger than the retention: kept
        assert all(e.at >= T0 + 2 * HOUR for e in storage.events_after(0))

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
