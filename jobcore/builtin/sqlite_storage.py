"""Built-in storage: SQLite for `sqlite:` URLs and plain paths."""

from __future__ import annotations

from jobcore.config import Config
from jobcore.hookspecs import hookimpl
from jobcore.storage.sqlite import SQLiteStorage, sqlite_path


@hookimpl(trylast=True)
def jobcore_storage_backend(url: str, config: Config, create: bool) -> SQLiteStorage | None:
    path = sqlite_path(url)
    if path is None:
        return None
    return SQLiteStorage(
        path,
        synchronous=config.core.synchronous,
        busy_timeout=config.core.busy_timeout,
        create=create,
        event_retention=config.core.event_retention,
    )
