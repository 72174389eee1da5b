"""APSW exceptions turned into StorageError classes; location checks; storable error texts."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

import apsw

from jobcore.errors import (
    NotADatabase,
    StorageBusy,
    StorageConnectionLost,
    StorageError,
    StorageFull,
    StorageIOError,
    StorageReadOnly,
    StorageUnavailable,
)

MAX_ERROR_CHARS = 8192
"""Longer error texts are cut (a traceback as an error message must not bloat every row)."""


def clean_text(text: str | None) -> str | None:
    """An error text SQLite can store: valid UTF-8 (lone surrogates replaced), bounded."""
    if text is None:
        return None
    if not isinstance(text, str):
        text = repr(text)
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS - 14] + "… (truncated)"
    if not text.isascii():
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def storage_error(exc: apsw.Error, path: str, busy_timeout_ms: int = 0) -> StorageError:
    """The `StorageError` subclass for an APSW exception, naming the problem and the fix."""
    said = f"(SQLite said: {str(exc).strip() or type(exc).__name__})"
    db = f"database {path}"
    match exc:
        case apsw.BusyError():
            return StorageBusy(
                f"{db} is busy: another process holds its write lock (waited "
                f"{busy_timeout_ms / 1000:g}s); try again, or raise busy_timeout "
                f"(JOBCORE_BUSY_TIMEOUT) {said}"
            )
        case apsw.LockedError():
            return StorageBusy(
                f"{db} is locked by another connection; try again when the other operation "
                f"has finished {said}"
            )
        case apsw.FullError():
            return StorageFull(
                f"{db} cannot grow: the disk (or its quota) is full; free space on the disk "
                f"that holds it {said}"
            )
        case apsw.NotADBError():
            return NotADatabase(
                f"{path} is not a SQLite database; choose another --db or move the file away {said}"
            )
        case apsw.CorruptError():
            return NotADatabase(f"{db} is corrupt; restore it from a backup {said}")
        case apsw.ReadOnlyError() | apsw.PermissionsError() | apsw.AuthError():
            return StorageReadOnly(
                f"{db} is read-only; make the file, its -wal/-shm files and its folder "
                f"writable {said}"
            )
        case apsw.CantOpenError():
            return StorageUnavailable(
                f"{db} cannot be opened; check that the path and its folder exist and are "
                f"accessible {said}"
            )
        case apsw.IOError() if _disk_full(path):  # e.g. no room for the -wal/-shm files
            return StorageFull(
                f"{db} cannot be opened or grow: the disk (or its quota) is full; free space "
                f"on the disk that holds it {said}"
            )
        case apsw.IOError():
            return StorageIOError(
                f"{db} could not be read or written (an I/O error); check the disk and the "
                f"file system it is on {said}"
            )
        case apsw.ConnectionClosedError():
            return StorageConnectionLost(f"{db}: the connection was closed {said}")
    return StorageError(f"{db} failed {said.replace('said: ', f'said: {type(exc).__name__}: ')}")


def _disk_full(path: str) -> bool:
    """Whether the file system holding `path` has no space left for ordinary users."""
    try:
        stats = os.statvfs(Path(path).parent if str(Path(path).parent) else ".")
    except OSError:
        return False
    return stats.f_bavail == 0


class _HasPath(Protocol):
    path: str
    busy_timeout_ms: int


F = TypeVar("F", bound=Callable[..., Any])


def boundary(method: F) -> F:
    """Translate APSW exceptions raised by `method` into StorageError subclasses."""

    @functools.wraps(method)
    def wrapper(self: _HasPath, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except apsw.Error as exc:
            raise storage_error(exc, self.path, self.busy_timeout_ms) from exc

    return cast(F, wrapper)


def check_location(path: str, *, create: bool) -> None:
    """Name a missing folder, a non-database file or an unwritable place before SQLite does."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise StorageUnavailable(
            f"cannot open database {path}: folder {folder} does not exist; "
            "create it or choose another --db"
        )
    if target.exists():
        if not target.is_file():
            raise StorageUnavailable(f"cannot open database {path}: it is not a file")
        try:
            with open(target, "rb") as handle:
                header = handle.read(16)
        except OSError as exc:
            raise StorageUnavailable(f"cannot read database {path}: {exc}") from None
        if header and header != b"SQLite format 3\x00":
            raise NotADatabase(
                f"{path} is not a SQLite database; choose another --db or move it away"
            )
    elif not create:
        raise StorageUnavailable(
            f"database {path} does not exist; enqueue a job or run a worker to create "
            "it, or point --db / JOBCORE_DB at an existing one"
        )
    if not os.access(folder, os.W_OK | os.X_OK) or (
        target.exists() and not os.access(target, os.W_OK)
    ):
        raise StorageReadOnly(
            f"cannot open database {path}: folder {folder} is not writable "
            "(SQLite needs to create journal files beside the database)"
        )
