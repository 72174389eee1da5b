"""Files and folders jobcore itself uses in this process, which no job may touch.

The SQLite storage registers its database, `Config.load` the config file it
read, the agent its cache folder (outbox and artifacts) and its token file.
Job types that write files (the files plugin, and through it the claude
plugin) refuse every target that is one of them, compared by device and inode,
or one of their names (a database's `-wal`, `-shm` and `-journal` beside it)."""

from __future__ import annotations

import os
import threading
from typing import Literal

Kind = Literal["database", "config", "file", "folder"]

_lock = threading.Lock()
_owned: dict[str, Kind] = {}


def own(path: str | os.PathLike[str], kind: Kind) -> None:
    """Record `path` (made absolute against the current directory) as jobcore's own."""
    with _lock:
        _owned[os.path.abspath(path)] = kind


def owned() -> list[tuple[str, Kind]]:
    """Every path registered so far in this process, with its kind."""
    with _lock:
        return list(_owned.items())
