"""The hub's own persistent state: where the hub finds it for a storage.

The contract (`HubStore`, its records) lives in the core's storage contract,
`jobcore.storage.hub_state`; a backend provides it through `hub_store()` on its
storage (docs/storage-backends.md). The names are re-exported here for the hub's
modules and older imports.
"""

from __future__ import annotations

from typing import Any

from jobcore.errors import StorageError
from jobcore.storage.hub_state import (
    LIMITED_HASH,
    MAX_QUERY_CHARS,
    TOKEN_COLUMNS,
    HubStore,
    JobFilter,
    Page,
    TokenRecord,
    WorkerRecord,
    stored_hash,
)
from jobcore.storage.powers import hub_store_of
from jobcore.storage.sqlite_hub import _MIGRATIONS, SQLiteHubStore

__all__ = [
    "LIMITED_HASH",
    "MAX_QUERY_CHARS",
    "TOKEN_COLUMNS",
    "_MIGRATIONS",
    "HubStore",
    "JobFilter",
    "Page",
    "SQLiteHubStore",
    "TokenRecord",
    "WorkerRecord",
    "hub_store_for",
    "stored_hash",
]


def hub_store_for(storage: Any) -> HubStore:
    """The `HubStore` beside `storage`: its own `hub_store()` (`jobcore.storage.powers`), else
    SQLite's in the file it names."""
    storage.migrate()  # the jobs schema (and the database) first
    store = hub_store_of(storage)
    if store is not None:
        return store
    path = getattr(storage, "path", None)
    if not isinstance(path, str):
        raise StorageError(
            f"the hub cannot keep tokens and workers in {type(storage).__name__}; "
            "its backend provides no hub_store()"
        )
    return SQLiteHubStore(path, busy_timeout_ms=getattr(storage, "busy_timeout_ms", 30_000))
