"""A transaction left open in the store's database holds events back: a warning names it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from jobcore_postgres import held_back
from jobcore_postgres.storage import PostgresStorage

from jobcore.ids import new_id
from jobcore.models import NewJob

Factory = Callable[..., PostgresStorage]


def _enqueue(store: PostgresStorage) -> None:
    fields: dict[str, Any] = {"run_at": None, "timeout_ms": None, "idempotency_key": None}
    store.insert(
        [NewJob(id=new_id(), type="t", queue="q", payload={}, priority=0, max_attempts=1, **fields)]
    )


@pytest.fixture(autouse=True)
def _quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(held_back, "HELD_BACK_WARN_AFTER", 0.2)
    monkeypatch.setattr(held_back, "HELD_BACK_CHECK_EVERY", 0.0)
    monkeypatch.setattr(held_back, "HELD_BACK_WARN_EVERY", 0.0)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "jobcore.postgres" and r.levelno == logging.WARNING
    ]


def test_an_idle_transaction_holding_events_back_is_named(
    pg_storage_factory: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    store = pg_storage_factory()
    cursor = store.last_event_seq()
    with psycopg.connect(store.target.conninfo) as idle:
        idle.execute("SELECT pg_current_xact_id()")  # takes an id, then stays idle in transaction
        pid = idle.info.backend_pid
        _enqueue(store)
        time.sleep(0.3)
        with caplog.at_level(logging.WARNING, logger="jobcore.postgres"):
            assert store.events_after(cursor) == []
        (warning,) = _warnings(caplog)
        assert f"pid {pid} (idle in transaction" in warning
        assert "idle_in_transaction_session_timeout" in warning
        idle.rollback()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="jobcore.postgres"):
        assert [e.kind for e in store.events_after(cursor)] == ["job:enqueued"]
        store.last_event_seq()
    assert _warnings(caplog) == []


def test_no_warning_when_nothing_is_held_back(
    pg_storage_factory: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    store = pg_storage_factory()
    _enqueue(store)
    time.sleep(0.3)
    with caplog.at_level(logging.DEBUG, logger="jobcore.postgres"):
        assert len(store.events_after(0)) == 1
        assert store.last_event_seq() > 0
    assert [r.getMessage() for r in caplog.records if "held-back" in r.getMessage()] == []
    assert _warnings(caplog) == []


def test_a_failing_check_is_logged_at_debug_not_raised(
    pg_storage_factory: Factory, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = pg_storage_factory()
    monkeypatch.setattr(held_back, "oldest_held_back_sql", lambda d: "SELECT * FROM no_such_table")
    with caplog.at_level(logging.DEBUG, logger="jobcore.postgres"):
        assert store.events_after(0) == []
    assert any("checking held-back events" in r.getMessage() for r in caplog.records)
