"""Helpers of the PostgreSQL tests (importable from test modules, unlike conftest)."""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections.abc import Iterator
from typing import Any, NoReturn
from urllib.parse import urlsplit, urlunsplit

import pytest
from testenv import wait_for

from jobcore import Queue, Worker
from jobcore.ids import new_id
from jobcore.models import NewJob

SERVER = os.environ.get("JOBCORE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")
"""The server the PostgreSQL tests use (`$JOBCORE_TEST_POSTGRES`)."""


def with_database(url: str, name: str) -> str:
    """`url` pointing at database `name`."""
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


def unavailable(reason: str) -> NoReturn:
    """Skip, saying why; under CI=true fail instead."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"PostgreSQL tests cannot run under CI: {reason}", pytrace=False)
    pytest.skip(f"PostgreSQL tests skipped: {reason}")


def temporary_database(prefix: str) -> Iterator[str]:
    """Generator for a session fixture: the URL of a new database `<prefix>_<pid>_<hex>`
    on `SERVER`, dropped at the end; skips (fails under CI) when no server answers."""
    try:
        import psycopg
    except ImportError as exc:
        unavailable(f"psycopg is not installed ({exc}); pip install -e '.[postgres]'")
    name = f"{prefix}_{os.getpid()}_{secrets.token_hex(3)}"
    try:
        with psycopg.connect(SERVER, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f"CREATE DATABASE {name}")
    except psycopg.OperationalError as exc:
        unavailable(f"no PostgreSQL server reachable at {SERVER} ({str(exc).strip()})")
    yield with_database(SERVER, name)
    with psycopg.connect(SERVER, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


HOUR = 3600.0


def start_idle_worker(queue: Queue, **options: Any) -> tuple[Worker, threading.Thread]:
    """A worker past its start: its first claim and first sweep done, its listener up.
    Its next heartbeat and sweep are a quarter and half an hour away."""
    worker = Worker(queue, lease=HOUR, **options)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    wait_for(lambda: worker.keeper.swept_once and queue.storage.pushes_changes, timeout=30)
    time.sleep(0.2)  # let the wake-up of the first sweep pass
    return worker, thread


def new_job(type: str = "noop", queue: str = "default", **fields: Any) -> NewJob:
    """A `NewJob` with plain defaults (a new id, no payload, 3 attempts); `fields` override."""
    values: dict[str, Any] = {
        "id": new_id(),
        "type": type,
        "queue": queue,
        "payload": {},
        "priority": 0,
        "max_attempts": 3,
        "run_at": None,
        "timeout_ms": None,
        "idempotency_key": None,
    }
    values.update(fields)
    return NewJob(**values)


def count_calls(storage: Any, *names: str) -> dict[str, int]:
    """Count calls of these storage methods from here on (the counts dict updates live)."""
    counts = dict.fromkeys(names, 0)
    for name in names:
        method = getattr(storage, name)

        def counted(*args: Any, _name: str = name, _method: Any = method, **kwargs: Any) -> Any:
            counts[_name] += 1
            return _method(*args, **kwargs)

        setattr(storage, name, counted)
    return counts
