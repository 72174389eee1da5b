"""A worker's start: its store must be reachable and its schema current before it says
it started.

A worker that runs until stopped waits for an unreachable store (one warning, then one
line a minute) and starts once it answers. A bounded run (`until_empty`, `max_jobs`)
waits only for a busy store, and for at most `BOUNDED_WAIT`; it fails at once on an
unreachable one, like every other command. A store that cannot become usable by
waiting (no such database, a wrong password, a schema newer than this code, not a
database) fails at once: the caller (the CLI) prints one `Error:` line.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from jobcore.attempt import describe_error
from jobcore.errors import StorageBusy, StorageError
from jobcore.group_commit import is_transient
from jobcore.keeper import MAX_DB_BACKOFF
from jobcore.storage.base import Storage

log = logging.getLogger("jobcore.worker")

REPEAT_EVERY = 60.0  # seconds between the lines of a worker waiting for its store
BOUNDED_WAIT = 30.0  # seconds a bounded run waits for a busy store (SQLite's write lock)


def ready_store(
    storage: Storage,
    *,
    wait: bool,
    stopping: Callable[[], bool],
    sleep: Callable[[float], None],
) -> bool:
    """Create or migrate the schema; False if stopped while waiting (`wait`) for the store.

    Raises the store's error when waiting cannot help or `wait` is false.
    """
    backoff = 0.0
    said_at: float | None = None
    give_up = time.monotonic() + BOUNDED_WAIT
    while True:
        try:
            storage.migrate()
            if said_at is not None:
                log.warning("the database answers again; starting")
            return True
        except Exception as exc:
            mono = time.monotonic()
            if isinstance(exc, StorageError) and not is_transient(exc):
                raise  # a newer schema, not a database, no such database: no use waiting
            if not wait and (not isinstance(exc, StorageBusy) or mono >= give_up):
                raise  # a bounded run: only a busy store is waited for, briefly
            if said_at is None or mono - said_at >= REPEAT_EVERY:
                log.warning(
                    "database error at start (%s); waiting for it (a line a minute)",
                    describe_error(exc),
                )
                said_at = mono
            if stopping():
                return False
            backoff = min(MAX_DB_BACKOFF, max(0.1, backoff * 2))
            sleep(backoff)
