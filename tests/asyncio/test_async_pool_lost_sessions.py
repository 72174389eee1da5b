"""`AsyncQueue` on PostgreSQL after its sessions are lost (the server restarted, an
administrator killed them): the enqueue that finds a dead connection fails, and the pool's
other broken idle connections are replaced, so the next enqueue succeeds rather than
failing once per pooled connection."""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

import psycopg
import pytest

from jobcore import AsyncQueue
from jobcore.errors import StorageError
from jobcore.testing import make_queue


def test_after_its_sessions_are_killed_one_enqueue_fails_and_the_next_succeeds(
    pg_server_database: str,
) -> None:
    import jobcore_postgres

    queue = make_queue(f"{pg_server_database}?schema=a{secrets.token_hex(4)}", jobcore_postgres)
    queue.storage.migrate()
    conninfo = queue.storage.target.conninfo  # type: ignore[attr-defined]

    async def main() -> tuple[int, list[str]]:
        async with AsyncQueue(queue=queue) as aq:
            await asyncio.gather(*(aq.enqueue("noop", {"sleep": n / 1000}) for n in range(8)))
            pool: Any = await aq._native.pool()
            pids = [conn.info.backend_pid for conn in pool._pool]  # its idle sessions
            assert len(pids) >= 2, pids  # several: one failure each without the check
            with psycopg.connect(conninfo, autocommit=True) as admin:
                for pid in pids:
                    admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
            with pytest.raises(StorageError):
                await aq.enqueue("noop", {})
            made = [await aq.enqueue("noop", {}) for n in range(len(pids))]
            return len(pids), [str(inserted.job.status) for inserted in made]

    try:
        killed, after = asyncio.run(main())
        assert after == ["pending"] * killed
        with psycopg.connect(conninfo) as look:
            [(count,)] = look.execute(
                f"SELECT count(*) FROM {queue.storage.schema}.jobs"  # type: ignore[attr-defined]
            ).fetchall()
        assert count == 8 + killed  # not the one that failed
    finally:
        queue.close()
