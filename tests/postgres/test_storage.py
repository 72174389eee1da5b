"""PostgreSQL-specific behaviour: migrations, URLs, errors, wake-ups, the outbox, claims, prune.

Query plans are checked in test_pg_query_plans.py.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from jobcore_postgres import admin as admin_module
from jobcore_postgres.schema import SCHEMA_VERSION
from jobcore_postgres.storage import PostgresStorage
from jobcore_postgres.url import parse_url, redact

from jobcore.errors import (
    ConfigError,
    SchemaTooNew,
    StorageConnectionLost,
    StorageError,
    StorageReadOnly,
    StorageUnavailable,
    TransientStorageError,
)
from jobcore.ids import new_id
from jobcore.models import Completed, JobStatus, Lease, NewJob

Factory = Callable[..., PostgresStorage]


def new_job(type: str = "noop", **fields: Any) -> NewJob:
    values: dict[str, Any] = {
        "id": new_id(),
        "type": type,
        "queue": "default",
        "payload": {},
        "priority": 0,
        "max_attempts": 3,
        "run_at": 0,
        "timeout_ms": None,
        "idempotency_key": None,
    }
    values.update(fields)
    return NewJob(**values)


# -- URLs ------------------------------------------------------------------------------


def test_url_parameters_of_jobcore_are_taken_off_the_conninfo() -> None:
    target = parse_url("postgresql://u:secret@h:5433/db?schema=jobs&poll_only=yes&sslmode=disable")
    assert (target.schema, target.poll_only) == ("jobs", True)
    assert target.conninfo == "postgresql://u:secret@h:5433/db?sslmode=disable"
    assert "secret" not in target.display and "***" in target.display
    assert redact("postgresql://u@h/db") == "postgresql://u@h/db"


@pytest.mark.parametrize(
    "url", ["postgresql://h/db?schema=Robert'); DROP", "postgresql://h/db?poll_only=maybe"]
)
def test_bad_url_parameters_are_config_errors(url: str) -> None:
    with pytest.raises(ConfigError):
        parse_url(url)


# -- migrations ------------------------------------------------------------------------


def _version(url: str, schema: str) -> int:
    with psycopg.connect(url.split("?")[0]) as conn:
        row = conn.execute(f"SELECT version FROM {schema}.schema_version").fetchone()
    assert row is not None
    return int(row[0])


def test_processes_migrating_at_once_queue_behind_one_lock(pg_url: str, pg_schema: str) -> None:
    code = (
        "import sys; from jobcore_postgres.storage import PostgresStorage as S; "
        "s = S(sys.argv[1]); s.migrate(); s.close()"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, pg_url], stderr=subprocess.PIPE)
        for _ in range(4)
    ]
    errors = [p.communicate(timeout=60)[1].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], errors
    assert _version(pg_url, pg_schema) == SCHEMA_VERSION


def test_a_current_schema_opens_without_waiting_for_the_migration_lock(
    pg_url: str, pg_schema: str, pg_storage_factory: Factory
) -> None:
    pg_storage_factory()  # migrated
    with psycopg.connect(pg_url.split("?")[0], autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(hashtext(%s))", (f"jobcore migrate {pg_schema}",))
        started = time.monotonic()
        second = PostgresStorage(pg_url, connect_timeout=2)
        second.migrate()
        second.close()
        assert time.monotonic() - started < 2


def test_a_newer_schema_is_a_clear_error(
    pg_url: str, pg_schema: str, pg_storage_factory: Factory
) -> None:
    pg_storage_factory()
    with psycopg.connect(pg_url.split("?")[0], autocommit=True) as conn:
        conn.execute(f"UPDATE {pg_schema}.schema_version SET version = 999")
    storage = PostgresStorage(pg_url)
    with pytest.raises(SchemaTooNew, match=r"version 999.*upgrade jobcore"):
        storage.get("x")
    storage.close()


def test_read_only_commands_do_not_create_the_schema(pg_url: str) -> None:
    storage = PostgresStorage(pg_url, create=False)
    with pytest.raises(StorageError, match="no jobcore store"):
        storage.get("x")
    storage.close()


# -- errors ------------------------------------------------------------------------------


def test_a_missing_database_is_permanent_and_names_the_fix(pg_database: str) -> None:
    storage = PostgresStorage(pg_database.rsplit("/", 1)[0] + "/no_such_db_here")
    with pytest.raises(StorageUnavailable, match=r"no_such_db_here.*create the database"):
        storage.get("x")
    storage.close()


def test_an_unreachable_server_is_transient() -> None:
    storage = PostgresStorage("postgresql://postgres@127.0.0.1:1/x", connect_timeout=1)
    with pytest.raises(StorageConnectionLost) as caught:
        storage.get("x")
    assert isinstance(caught.value, TransientStorageError)
    assert "127.0.0.1" in str(caught.value)
    storage.close()


def test_a_dropped_connection_is_transient_and_the_next_call_reconnects(
    pg_storage_factory: Factory,
) -> None:
    storage = pg_storage_factory(pool_min=1, pool_max=1)
    [inserted] = storage.insert([new_job()])
    with storage._pool.connection() as conn:  # kill the pooled backend from the server side
        pid = conn.info.backend_pid
    with psycopg.connect(storage.target.conninfo, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    with pytest.raises(StorageConnectionLost):
        storage.get(inserted.job.id)
    assert storage.get(inserted.job.id) is not None


def test_an_exhausted_pool_is_transient_and_names_the_setting(
    pg_storage_factory: Factory,
) -> None:
    storage = pg_storage_factory(pool_min=1, pool_max=1, connect_timeout=1)
    caught: list[BaseException] = []

    def other_thread() -> None:
        try:
            storage.get("x")
        except BaseException as exc:
            caught.append(exc)

    with storage.transaction():  # holds the only connection
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join(10)
    assert len(caught) == 1 and isinstance(caught[0], StorageConnectionLost)
    assert "pool_max" in str(caught[0])
    assert storage.get("x") is None  # and the pool serves again


def test_a_read_only_server_is_permanent_and_reads_still_work(
    pg_database: str, pg_url: str, pg_storage_factory: Factory
) -> None:
    [inserted] = pg_storage_factory().insert([new_job()])
    name = pg_database.rsplit("/", 1)[1]
    with psycopg.connect(pg_database, autocommit=True) as admin:
        admin.execute(f"ALTER DATABASE {name} SET default_transaction_read_only = on")
        try:
            replica = PostgresStorage(pg_url)  # new sessions: read-only, like a hot standby
            assert replica.get(inserted.job.id) is not None
            with pytest.raises(StorageReadOnly, match="read-only"):
                replica.insert([new_job()])
            replica.close()
        finally:
            admin.execute(f"ALTER DATABASE {name} RESET default_transaction_read_only")


# -- wake-ups ----------------------------------------------------------------------------


@pytest.mark.parametrize("poll_only", [False, True])
def test_a_commit_elsewhere_wakes_a_waiter(pg_storage_factory: Factory, poll_only: bool) -> None:
    waiter = pg_storage_factory(poll_only=poll_only)
    other = pg_storage_factory()
    assert waiter.wait_for_change(0) is False
    assert waiter.wait_for_change(0.05) is False
    woke: list[tuple[bool, float, bool]] = []

    def wait() -> None:  # "changed since this thread last looked"
        started = time.monotonic()
        changed = waiter.wait_for_change(10)
        woke.append((changed, time.monotonic() - started, waiter.wait_for_change(0)))

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(0.2)
    other.insert([new_job()])
    thread.join(10)
    assert woke and woke[0][0] is True
    assert woke[0][1] < 2  # woken by the commit, not by the 10 s timeout
    assert woke[0][2] is False  # and that change is now seen


def test_notifications_are_coalesced_per_transaction(pg_storage_factory: Factory) -> None:
    storage = pg_storage_factory()
    with psycopg.connect(storage.target.conninfo, autocommit=True) as listen:
        listen.execute(f"LISTEN {storage.schema}_changes")
        storage.insert([new_job() for _ in range(50)])
        with storage.transaction():
            storage.insert([new_job()])
            storage.insert([new_job()])
        got = list(listen.notifies(timeout=0.5))
    assert len(got) == 2 and all(n.payload == "" for n in got)


# -- the outbox --------------------------------------------------------------------------


def _app_table(conn: psycopg.Connection[Any]) -> None:
    conn.execute("CREATE TABLE IF NOT EXISTS public.orders (id text PRIMARY KEY)")


def test_outbox_commits_and_rolls_back_with_the_application(
    pg_storage_factory: Factory,
) -> None:
    storage = pg_storage_factory()
    url = storage.target.conninfo
    with psycopg.connect(url) as app:
        _app_table(app)
        app.commit()
        kept, lost = new_job(), new_job()
        with app.transaction():
            app.execute("INSERT INTO public.orders VALUES ('kept')")
            storage.insert([kept], conn=app)
        with pytest.raises(RuntimeError), app.transaction():
            app.execute("INSERT INTO public.orders VALUES ('lost')")
            storage.insert([lost], conn=app)
            raise RuntimeError("application failed")
        orders = [row[0] for row in app.execute("SELECT id FROM public.orders ORDER BY id")]
    assert orders == ["kept"]
    assert storage.get(kept.id) is not None
    assert storage.get(lost.id) is None


def test_outbox_refuses_something_that_is_not_a_psycopg_connection(
    pg_storage_factory: Factory,
) -> None:
    with pytest.raises(StorageError, match="psycopg"):
        pg_storage_factory().insert([new_job()], conn=object())


# -- claims ------------------------------------------------------------------------------


def test_claim_takes_exactly_the_limit_under_contention(pg_storage_factory: Factory) -> None:
    storage = pg_storage_factory()
    storage.insert([new_job() for _ in range(500)])
    claimed: list[str] = []
    lock = threading.Lock()

    def claimer(name: str) -> None:
        mine = pg_storage_factory()
        while jobs := mine.claim(worker=name, limit=7, lease_ms=60_000):
            assert len(jobs) <= 7
            with lock:
                claimed.extend(job.id for job in jobs)

    threads = [threading.Thread(target=claimer, args=(f"w{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(claimed) == 500 and len(set(claimed)) == 500


def test_prune_deletes_in_bounded_batches(
    pg_storage_factory: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admin_module, "PRUNE_BATCH", 3)
    storage = pg_storage_factory()
    storage.insert([new_job() for _ in range(8)] + [new_job()])
    jobs = storage.claim(worker="w", limit=8, lease_ms=60_000)
    storage.record([Completed(Lease.of(job), None) for job in jobs])
    assert storage.prune(before=storage.now() + 1) == 8
    assert storage.count_by_status() == {"pending": 1}


def test_the_sweep_catches_up_on_old_events_in_bounded_batches(
    pg_storage_factory: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A busy queue writes events faster than one batch per sweep: the sweep keeps deleting."""
    monkeypatch.setattr(admin_module, "EVENT_PRUNE_BATCH", 3)
    storage = pg_storage_factory(event_retention_ms=60_000)
    with psycopg.connect(storage.target.conninfo, autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {storage.schema}.events (at, kind) SELECT "
            f"{storage.schema}.now_ms() - CASE WHEN g <= 10 THEN 120000 ELSE 0 END, 'x' "
            "FROM generate_series(1, 15) g"
        )
        storage.sweep(force=True)
        row = conn.execute(f"SELECT count(*) FROM {storage.schema}.events").fetchone()
    assert row is not None and row[0] == 5  # the 10 old ones gone, in 4 batches; newer kept


def test_the_store_clock_is_the_servers(pg_storage_factory: Factory) -> None:
    storage = pg_storage_factory()
    with psycopg.connect(storage.target.conninfo) as conn:
        row = conn.execute("SELECT (extract(epoch FROM now()) * 1000)::bigint").fetchone()
    assert row is not None
    assert abs(storage.now() - int(row[0])) < 5_000
    [inserted] = storage.insert([new_job(run_at=0)])
    assert abs(inserted.job.created_at - storage.now()) < 5_000
    assert inserted.job.status is JobStatus.PENDING
