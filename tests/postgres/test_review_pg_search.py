"""Review: on PostgreSQL, the hub's `q` search must find `"` and `\\` (jsonb text escapes
them) and the dashboard's count with a search must run (`jsonb LIKE` does not exist)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from jobcore_postgres.storage import PostgresStorage

from jobcore import Queue

hub = pytest.importorskip("jobcore_http.store", reason="the hub plugin (jobcore_http) is not here")


def test_pg_search_and_dashboard_count(
    pg_url: str, pg_storage_factory: Callable[..., PostgresStorage]
) -> None:
    from jobcore_http.dashboard.filters import JobFilter
    from jobcore_http.dashboard.reader import Reader

    pg_storage_factory()  # schema
    with Queue(pg_url) as queue:
        for text in ("café crème", 'a "quoted" word', "back\\slash", "plain"):
            queue.enqueue("shell", {"command": f"echo {text}"})
        store = hub.hub_store_for(queue.storage)
        reader = Reader(queue, store)
        for q, expected in (("café", 1), ('"quoted"', 1), ("back\\slash", 1), ("echo", 4)):
            jobs = store.search_jobs(JobFilter(q=q).for_hub(), before=None, limit=100).jobs
            assert len(jobs) == expected, q
            assert reader.count(JobFilter(q=q)) == expected, q
        reader.close()
