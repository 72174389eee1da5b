"""A worker on PostgreSQL prefetches the store's `default_prefetch` unless a setting says."""

from __future__ import annotations

from pathlib import Path

import jobcore_postgres
from jobcore_postgres.storage import PostgresStorage

from jobcore import Worker
from jobcore.storage.sqlite import SQLiteStorage
from jobcore.testing import make_queue


def test_a_worker_on_postgres_takes_the_stores_prefetch_when_no_setting_gives_one(
    pg_url: str,
) -> None:
    queue = make_queue(pg_url, jobcore_postgres)
    try:
        assert Worker(queue).prefetch == PostgresStorage.default_prefetch != 32
    finally:
        queue.close()


def test_a_prefetch_setting_or_argument_wins_over_the_stores(pg_url: str) -> None:
    queue = make_queue(pg_url, jobcore_postgres, prefetch=32)
    try:
        assert Worker(queue).prefetch == 32
        assert Worker(queue, prefetch=7).prefetch == 7
    finally:
        queue.close()


def test_sqlite_takes_its_own_default(tmp_path: Path) -> None:
    queue = make_queue(tmp_path / "q.db")
    try:
        assert Worker(queue).prefetch == SQLiteStorage.default_prefetch == 100
    finally:
        queue.close()
