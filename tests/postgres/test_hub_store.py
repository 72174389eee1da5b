"""The hub's tokens and workers registry kept in PostgreSQL (`PostgresStorage.hub_store()`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import psycopg
import pytest
from jobcore_postgres.storage import PostgresStorage

from jobcore.errors import IllegalTransition
from jobcore.ids import new_id
from jobcore.models import Completed, Lease, NewJob

hub = pytest.importorskip("jobcore_http.store", reason="the hub plugin (jobcore_http) is not here")


def job(type: str = "noop", payload: dict[str, object] | None = None) -> NewJob:
    return NewJob(
        id=new_id(),
        type=type,
        queue="default",
        payload=payload or {},
        priority=0,
        max_attempts=3,
        run_at=None,
        timeout_ms=None,
        idempotency_key=None,
    )


def test_tokens_workers_and_job_search(pg_storage_factory: Callable[..., PostgresStorage]) -> None:
    storage = pg_storage_factory()
    store = hub.hub_store_for(storage)
    store.migrate()
    store.ping()
    token = hub.TokenRecord("ci", "h1", "admin", None, 1)
    store.add_token(token)
    with pytest.raises(IllegalTransition, match="ci"):
        store.add_token(hub.TokenRecord("ci", "h2", "read", None, 2))
    assert store.token_by_hash("h1") == token
    assert store.revoke_token("ci", 5) and not store.revoke_token("ci", 6)
    assert store.token_by_hash("h1") is None
    assert [t.revoked_at for t in store.list_tokens()] == [5]

    first = hub.WorkerRecord(
        "w1", name="box", cores=4, tags=["gpu"], registered_at=10, last_seen=10
    )
    assert store.upsert_worker(first) is True and store.upsert_worker(first) is False
    assert store.touch_workers({"w1": 20, "w2": 20}) == []
    assert store.set_drain("w1", True) and not store.set_drain("nobody", True)
    assert sorted(store.mark_lost(before=30, now=31)) == ["w1", "w2"]
    assert store.touch_workers({"w2": 40}) == ["w2"]
    workers = {w.worker_id: w for w in store.list_workers()}
    assert workers["w1"].lost_at == 31 and workers["w1"].drain and workers["w1"].tags == ["gpu"]
    assert workers["w2"].lost_at is None and workers["w2"].last_seen == 40

    storage.insert([job(payload={"needle": "hay"}), job("x"), job()])
    [claimed] = storage.claim(worker="w9", limit=1, lease_ms=60_000, types=["x"])
    storage.record([Completed(Lease.of(claimed), None)])
    every = store.search_jobs(hub.JobFilter(), before=None, limit=10).jobs
    assert [j.id for j in every] == sorted((j.id for j in every), reverse=True)
    by_worker = store.search_jobs(hub.JobFilter(worker="w9"), before=None, limit=10)
    assert [j.id for j in by_worker.jobs] == [claimed.id] and by_worker.next_cursor is None
    found = store.search_jobs(hub.JobFilter(q="NEEDLE"), before=None, limit=10).jobs
    assert [j.payload for j in found] == [{"needle": "hay"}]
    page = store.search_jobs(hub.JobFilter(types=("noop",)), before=every[0].id, limit=1)
    assert len(page.jobs) == 1 and page.jobs[0].id < every[0].id
    assert page.next_cursor is None  # no older noop job
    assert store.claims_by_worker() == {}
    storage.insert([dataclasses.replace(job("t"), timeout_ms=1000)])
    [running] = storage.claim(worker="w8", limit=1, lease_ms=60_000, types=["t"])
    assert store.claims_by_worker() == {"w8": [running.id]}
    assert store.overdue_claims(storage.now()) == []
    assert [j.id for j in store.overdue_claims(storage.now() + 10**10)] == [running.id]
    assert set(store.jobs_by_id([claimed.id, "missing"])) == {claimed.id}


def test_tokens_keep_their_job_types_and_queues(
    pg_storage_factory: Callable[..., PostgresStorage],
) -> None:
    store = hub.hub_store_for(pg_storage_factory())
    store.migrate()
    limited = hub.TokenRecord("p", "h1", "produce", None, 1, types=("noop", "x.y"), queues=("q",))
    open_one = hub.TokenRecord("a", "h2", "agent", "a", 2, queues=("q",))
    store.add_token(limited)
    store.add_token(open_one)
    assert store.token_by_hash("h1") == limited
    assert store.token_by_hash("h2") == open_one and store.token_by_hash("h2").types is None
    assert store.list_tokens() == [limited, open_one]
    assert [t.to_json()["types"] for t in store.list_tokens()] == [["noop", "x.y"], None]


def test_an_old_store_upgrades_and_its_tokens_keep_full_rights(
    pg_database: str, pg_schema: str
) -> None:
    from jobcore_postgres.schema import MIGRATIONS

    s = pg_schema
    before = [name for name, _ in MIGRATIONS].index("hub tokens limited to job types and queues")
    with psycopg.connect(pg_database, autocommit=True) as conn, conn.transaction():
        for _, script in MIGRATIONS[:before]:
            conn.execute(script.format(s=s).encode())
        conn.execute(f"UPDATE {s}.schema_version SET version = %s", (before,))
        conn.execute(
            f"INSERT INTO {s}.hub_tokens (name, hash, scope, created_at) "
            "VALUES ('old', 'h-old', 'produce', 0)"
        )
    storage = PostgresStorage(f"{pg_database}?schema={s}")
    try:
        store = hub.hub_store_for(storage)
        old = store.token_by_hash("h-old")
        assert old is not None and old.scope == "produce"
        assert old.types is None and old.queues is None and not old.limits.limited
        with storage._write() as conn:  # a damaged limit reads as "nothing", never as "any"
            conn.execute(f"UPDATE {s}.hub_tokens SET types = '\"noop\"'::jsonb")
        damaged = store.token_by_hash("h-old")
        assert damaged is not None and damaged.types == () and damaged.limits.limited
        # a JSON null (not SQL NULL) is damage too: psycopg decodes both to None
        with storage._write() as conn:
            conn.execute(f"UPDATE {s}.hub_tokens SET types = NULL, queues = 'null'::jsonb")
        damaged = store.token_by_hash("h-old")
        assert damaged is not None and damaged.types is None and damaged.queues == ()
        assert damaged.limits.limited
        assert [t.queues for t in store.list_tokens()] == [()]
    finally:
        storage.close()


def test_a_hub_older_than_limits_finds_no_limited_token(
    pg_storage_factory: Callable[..., PostgresStorage],
) -> None:
    """An old hub still running on an upgraded schema looks tokens up by the bare SHA-256
    and ignores the limits columns: it must find no limited token, never grant it any job."""
    from jobcore_http.grants import Limits
    from jobcore_http.tokens import create_token, token_hash

    storage = pg_storage_factory()
    store = hub.hub_store_for(storage)
    store.migrate()
    limited, _ = create_token(store, "lim", "produce", None, 1, Limits(("noop",), None))
    unlimited, _ = create_token(store, "open", "produce", None, 1)
    tokens = storage._d.table("hub_tokens")
    pre_limits = (
        f"SELECT name, hash, scope, agent_id, created_at, revoked_at FROM {tokens} "
        "WHERE hash = %s AND revoked_at IS NULL"
    )
    with storage._connection() as conn:
        for token, found in ((limited, []), (unlimited, ["open"])):
            rows = conn.execute(pre_limits, (token_hash(token),)).fetchall()
            assert [row[0] for row in rows] == found
    record = store.token_by_hash(token_hash(limited))
    assert record is not None and record.matches(token_hash(limited))
    assert record.types == ("noop",) and record.queues is None
    with storage._write() as conn:  # marked limited, limits lost: nothing, never any
        conn.execute(f"UPDATE {tokens} SET types = NULL WHERE name = 'lim'")
    record = store.token_by_hash(token_hash(limited))
    assert record is not None and record.types == () and record.limits.limited
