"""A test plugin: SQLite storage whose clock is this machine's plus an offset a test steps.

`JOBCORE_TEST_CLOCK_OFFSET` names a file holding the offset in ms (absent: 0). Every
process loading this plugin (`JOBCORE_PLUGINS=jobcore_test_plugin,shifted_clock`) reads
it at each look at the clock, so rewriting it steps the store's clock of all of them at
once, as a step of the machine's clock does.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from jobcore import hookimpl
from jobcore.config import Config
from jobcore.storage.sqlite import SQLiteStorage, sqlite_path
from jobcore.timeutil import now_ms


def shifted_clock(offset_file: Path) -> Callable[[], int]:
    def now() -> int:
        try:
            offset = int(offset_file.read_text() or 0)
        except FileNotFoundError:
            offset = 0
        return now_ms() + offset

    return now


def step(offset_file: Path, offset_ms: int) -> None:
    """Set every such store's clock to this machine's plus `offset_ms` (atomically)."""
    partial = offset_file.with_name(offset_file.name + ".new")
    partial.write_text(str(offset_ms))
    os.replace(partial, offset_file)


@hookimpl(tryfirst=True)
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
        clock=shifted_clock(Path(os.environ["JOBCORE_TEST_CLOCK_OFFSET"])),
    )
