"""While the listening connection cannot come back (new connections refused, the pooled
ones still commit), the hub's change waiter looks every `DOWN_POLL`, not only at each
reconnect attempt (up to 2 s apart): its zero-timeout looks are never "maybe changed"."""

from __future__ import annotations

import time
from collections.abc import Callable
from urllib.parse import urlsplit

import psycopg
from jobcore_http.waiter import ChangeWaiter
from jobcore_postgres.storage import PostgresStorage
from pg_testing import SERVER
from testenv import wait_for

from jobcore.testing import make_queue

Factory = Callable[..., PostgresStorage]


def test_the_waiter_hears_a_commit_within_half_a_second_while_the_listener_is_down(
    pg_url: str, pg_storage_factory: Factory
) -> None:
    import jobcore_postgres

    database = urlsplit(pg_url).path.lstrip("/")
    queue = make_queue(pg_url, jobcore_postgres)
    storage = pg_storage_factory()
    other = pg_storage_factory()  # another process: its pooled connection stays up
    other.insert([queue.build("noop", {})])
    waiter = ChangeWaiter(storage, storage.wake_key)
    heard: list[float] = []
    waiter.subscribe(lambda: heard.append(time.monotonic()))
    waiter.start()
    admin = psycopg.connect(SERVER, autocommit=True)
    try:
        wait_for(lambda: storage.pushes_changes, timeout=10)
        admin.execute(f"ALTER DATABASE {database} ALLOW_CONNECTIONS false")
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND query LIKE 'LISTEN%%'",
            (database,),
        )
        wait_for(lambda: not storage.pushes_changes, timeout=10)
        time.sleep(3.0)  # the reconnect attempts are 2 s apart by now
        late = []
        for _ in range(4):  # one of them at least falls between two reconnect attempts
            heard.clear()
            sent = time.monotonic()
            other.insert([queue.build("noop", {})])
            wait_for(lambda: heard, timeout=5)
            late.append(round(heard[0] - sent, 2))
            time.sleep(0.7)
        # DOWN_POLL is 0.25 s; without it, 1.3 s (the reconnect attempts, 2 s apart)
        assert max(late) < 1.0, f"commits heard {late} s after"
    finally:
        admin.execute(f"ALTER DATABASE {database} ALLOW_CONNECTIONS true")
        admin.close()
        waiter.stop()
        queue.close()
