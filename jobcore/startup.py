"""A worker's start: its store must be reachable and its schema current before it says
it started.

A worker that runs until stopped waits for an unreachable store (one warning, then one
line a minute) and starts once it answers. A bounded run (`until_empty`, `max_jobs`)
and a store that cannot become usable by waiting (no such database, a wrong password,
a schema newer than this code, not a database) fail at once: the caller (the CLI)
prints one `Error:` line.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from jobcore.attempt import describe_error
from jobcore.errors import StorageError
from jobcore.group_commit import is_transient
from jobcore.keeper import MAX_DB_BACKOFF
from jobcore.storage.base import Storage

log = logging.getLogger("jobcore.worker")

REPEAT_EVERY = 60.0  # seconds between the lines of a worker waiting for its store


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
    while True:
        try:
            storage.migrate()
            if said_at is not None:
                log.warning("the database answers again; starting")
            return True
        except Exception as exc:
            if not wait or (isinstance(exc, StorageError) and not is_transient(exc)):
                raise  # a bounded run, a newer schema, not a database: no use waiting
            mono = time.monotonic()
            if said_at is None or mono - said_at >= REPEAT_EVERY:
                log.warning(
                    "cannot reach the database (%s); waiting for it (a line a minute)",
                    describe_error(exc),
                )
                said_at = mono
            if stopping():
                return False
            backoff = min(MAX_DB_BACKOFF, max(0.1, backoff * 2))
            sleep(backoff)
