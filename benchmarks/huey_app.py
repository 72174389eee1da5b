"""A Huey application on SQLite, for comparison (a benchmark-only dependency)."""

from __future__ import annotations

import threading
import time
from typing import Any

from huey import SqliteHuey
from huey.storage import SqliteStorage

executed = 0
_lock = threading.Lock()


class NormalSyncStorage(SqliteStorage):  # type: ignore[misc]
    """Huey's SQLite storage at synchronous=NORMAL (its `fsync` option knows only FULL or OFF)."""

    def _create_connection(self) -> Any:
        conn = super()._create_connection()
        conn.execute("pragma synchronous=1")
        return conn


def make_huey(path: str, sync: str, results: bool = False) -> Any:
    if sync == "FULL":
        huey = SqliteHuey("bench", filename=path, fsync=True, results=results)
    else:
        huey = SqliteHuey("bench", filename=path, results=results, storage_class=NormalSyncStorage)
    return huey


def register_tasks(huey: Any) -> tuple[Any, Any]:
    @huey.task()
    def noop() -> None:
        global executed
        with _lock:
            executed += 1

    @huey.task()
    def stamp(t0: float) -> float:
        return (time.time() - t0) * 1000

    return noop, stamp
