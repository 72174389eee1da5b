"""The hub's state (`jobcore.storage.hub_state.HubStore`) and the optional powers a backend
declares (`jobcore.storage.powers`): what a backend a hub runs on must keep and answer."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from jobcore.errors import IllegalTransition
from jobcore.grants import Limits
from jobcore.models import Completed
from jobcore.storage import powers
from jobcore.storage.base import Storage
from jobcore.storage.hub_state import (
    LIMITED_HASH,
    HubStore,
    JobFilter,
    TokenRecord,
    WorkerRecord,
    stored_hash,
)
from jobcore.testing.contract.base import ContractBase, FakeClock, lease_of, new_job


class HubStateRules(ContractBase):
    """`hub_store()` and the optional powers; a backend offering no hub state is skipped
    here (no hub can run on it)."""

    @pytest.fixture
    def hub_store(self, storage: Storage) -> Iterator[HubStore]:
        store = powers.hub_store_of(storage)
        if store is None:
            pytest.skip("this backend keeps no hub state (no hub_store())")
        store.migrate()
        yield store
        store.close()

    def test_hub_store_is_the_contract_and_migrates_twice(
        self, storage: Storage, hub_store: HubStore
    ) -> None:
        assert isinstance(storage, powers.KeepsHubState)
        assert isinstance(hub_store, HubStore)
        hub_store.migrate()  # idempotent
        hub_store.ping()

    def test_hub_tokens(self, hub_store: HubStore) -> None:
        token = TokenRecord("ci", "h1", "admin", None, 1)
        hub_store.add_token(token)
        with pytest.raises(IllegalTransition, match="ci"):
            hub_store.add_token(TokenRecord("ci", "h2", "read", None, 2))
        assert hub_store.token_by_hash("h1") == token
        assert hub_store.token_by_hash("h2") is None
        limits = Limits(("noop", "x.y"), ("q",))
        limited = TokenRecord(
            "p", stored_hash("h3", limits), "produce", None, 3, types=limits.types, queues=("q",)
        )
        hub_store.add_token(limited)
        assert limited.hash == LIMITED_HASH + "h3"
        found = hub_store.token_by_hash("h3")  # looked up by the bare digest too
        assert found == limited and found.limits == limits and found.matches("h3")
        assert hub_store.revoke_token("ci", 5) and not hub_store.revoke_token("ci", 6)
        assert hub_store.token_by_hash("h1") is None
        assert [(t.name, t.revoked_at) for t in hub_store.list_tokens()] == [
            ("ci", 5),
            ("p", None),
        ]
        hub_store.add_token(TokenRecord("ci", "h4", "read", None, 7))  # the name is free again

    def test_hub_workers(self, hub_store: HubStore) -> None:
        first = WorkerRecord(
            "w1", name="box", cores=4, tags=["gpu"], registered_at=10, last_seen=10
        )
        assert hub_store.upsert_worker(first) is True
        assert hub_store.upsert_worker(first) is False
        assert hub_store.touch_workers({"w1": 20, "w2": 20}) == []
        assert hub_store.set_drain("w1", True) and not hub_store.set_drain("nobody", True)
        assert sorted(hub_store.mark_lost(before=30, now=31)) == ["w1", "w2"]
        assert hub_store.mark_lost(before=30, now=32) == []  # marked once
        assert hub_store.touch_workers({"w2": 40}) == ["w2"]
        workers = {w.worker_id: w for w in hub_store.list_workers()}
        assert workers["w1"].lost_at == 31 and workers["w1"].drain
        assert workers["w1"].tags == ["gpu"] and workers["w1"].cores == 4
        assert workers["w2"].lost_at is None and workers["w2"].last_seen == 40

    def test_hub_job_listing(self, storage: Storage, hub_store: HubStore, clock: FakeClock) -> None:
        storage.insert([new_job(payload={"needle": "hay"}), new_job("x"), new_job()])
        [claimed] = self.claim(storage, limit=1, worker="w9", types=["x"])
        storage.record([Completed(lease_of(claimed), None)])
        every = hub_store.search_jobs(JobFilter(), before=None, limit=10).jobs
        assert len(every) == 3
        assert [j.id for j in every] == sorted((j.id for j in every), reverse=True)
        by_worker = hub_store.search_jobs(JobFilter(worker="w9"), before=None, limit=10)
        assert [j.id for j in by_worker.jobs] == [claimed.id] and by_worker.next_cursor is None
        found = hub_store.search_jobs(JobFilter(q="NEEDLE"), before=None, limit=10).jobs
        assert [j.payload for j in found] == [{"needle": "hay"}]
        done = hub_store.search_jobs(JobFilter(statuses=("completed",)), before=None, limit=10)
        assert [j.id for j in done.jobs] == [claimed.id]
        page = hub_store.search_jobs(JobFilter(types=("noop",)), before=every[0].id, limit=1)
        assert len(page.jobs) == 1 and page.jobs[0].id < every[0].id
        assert hub_store.claims_by_worker() == {}
        storage.insert([new_job("t", timeout_ms=1000)])
        [running] = self.claim(storage, limit=1, worker="w8", types=["t"])
        assert hub_store.claims_by_worker() == {"w8": [running.id]}
        assert hub_store.overdue_claims(clock()) == []
        assert [j.id for j in hub_store.overdue_claims(clock() + 10**6)] == [running.id]
        assert set(hub_store.jobs_by_id([claimed.id, "missing"])) == {claimed.id}

    def test_declared_powers_keep_their_shape(self, storage: Storage) -> None:
        """A power a backend declares has the shape `jobcore.storage.powers` documents."""
        if hasattr(storage, "pushes_changes"):
            assert isinstance(storage, powers.PushesChanges)
            assert isinstance(storage.pushes_changes, bool)
            assert isinstance(powers.change_look(storage)(0), bool)
        else:
            assert powers.change_look(storage) == storage.wait_for_change
        if hasattr(storage, "scheduled_seen"):
            assert isinstance(storage, powers.ReadsAhead) and powers.reads_ahead(storage)
            seen = storage.scheduled_seen()
            assert seen is None or (isinstance(seen, tuple) and len(seen) == 2)
        if hasattr(storage, "watch_writes"):
            assert isinstance(storage, powers.WatchesWrites)
            watch = powers.write_watch(storage, threading.Condition())
            try:
                assert 0 < watch.look_in(0.25, 0.003) <= 0.25  # never past the deadline
            finally:
                watch.close()
        if hasattr(storage, "default_prefetch"):
            prefetch = powers.default_prefetch(storage, -1)
            assert isinstance(prefetch, int) and prefetch >= 1
        else:
            assert powers.default_prefetch(storage, 7) == 7
