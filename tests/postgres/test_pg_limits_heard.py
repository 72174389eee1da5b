"""A limit set by another process reaches a running PostgreSQL store at once (DESIGN §16):
the NOTIFY of the change makes the store's next claim read whether limits exist, instead
of trusting its last look for up to `LIMITS_CHECK_EVERY`; meanwhile the plain claim claims
nothing under a limit it does not know of (it never passes one)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import pytest
from jobcore_postgres import limits as pg_limits
from jobcore_postgres.storage import PostgresStorage
from pg_testing import new_job
from testenv import subprocess_env, wait_for

Factory = Callable[..., PostgresStorage]


def _jobcore(url: str, *args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "jobcore", "--db", url, *args],
        check=True,
        capture_output=True,
        env=subprocess_env(),
        timeout=60,
    )


def test_a_limit_set_elsewhere_is_claimed_under_once_heard(
    pg_storage_factory: Factory, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pg_limits, "LIMITS_CHECK_EVERY", 3600.0)  # only the NOTIFY can tell
    storage = pg_storage_factory()
    storage.insert([new_job() for _ in range(3)])
    storage.wait_for_change(0)  # listening from here on
    wait_for(lambda: storage.pushes_changes, timeout=10)
    storage.wait_for_change(0)
    # this store looks, and sees no limit (the claim filters another queue: claims nothing)
    assert storage.claim(worker="w", limit=5, lease_ms=60_000, queues=["other"]) == []
    _jobcore(pg_url, "limit", "--type", "noop", "--concurrency", "2")
    wait_for(lambda: storage.wait_for_change(0.5), timeout=10)  # its notification arrived
    assert len(storage.claim(worker="w", limit=5, lease_ms=60_000)) == 2  # under it, at once
    assert storage.claim(worker="w", limit=5, lease_ms=60_000) == []
    _jobcore(pg_url, "limit", "--type", "noop", "--clear")
    wait_for(lambda: storage.wait_for_change(0.5), timeout=10)
    assert len(storage.claim(worker="w", limit=5, lease_ms=60_000)) == 1
