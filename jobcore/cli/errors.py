"""Turning expected failures into one `Error: …` line (exit 1) at the command-line boundary.

Storage backends raise `StorageError` with a message naming the problem and
the fix. Driver exceptions that still reach the CLI (SQLite's, raised by APSW)
are described here in the same way, so a busy, full, failing or foreign
database file never shows a traceback.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager

import apsw
import click

from jobcore.errors import JobcoreError

# (driver exception, what went wrong, what to do); the first match wins
_SQLITE_FAILURES: tuple[tuple[type[apsw.Error], str, str], ...] = (
    (
        apsw.BusyError,
        "is busy: another process holds its write lock",
        "try again, or raise busy_timeout (JOBCORE_BUSY_TIMEOUT)",
    ),
    (
        apsw.LockedError,
        "is locked by another connection",
        "try again when the other operation has finished",
    ),
    (
        apsw.FullError,
        "cannot grow: the disk (or its quota) is full",
        "free space on the disk that holds it",
    ),
    (
        apsw.NotADBError,
        "is not a SQLite database",
        "choose another --db or move the file away",
    ),
    (
        apsw.CorruptError,
        "is corrupt",
        "restore it from a backup",
    ),
    (
        apsw.ReadOnlyError,
        "is read-only",
        "make the file and its folder writable",
    ),
    (
        apsw.CantOpenError,
        "cannot be opened",
        "check that the path and its folder exist and are accessible",
    ),
    (
        apsw.IOError,
        "could not be read or written (an I/O error)",
        "check the disk and the file system it is on",
    ),
)

_OS_FAILURES = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is used up",
    errno.EIO: "an I/O error",
    errno.EROFS: "a read-only file system",
}


def describe_driver_error(exc: apsw.Error, db: str) -> str:
    """One line naming what went wrong with database `db` and what to do about it."""
    detail = str(exc).strip()
    for kind, problem, fix in _SQLITE_FAILURES:
        if isinstance(exc, kind):
            return f"database {db} {problem}; {fix} (SQLite said: {detail})"
    return f"database {db} failed (SQLite said: {type(exc).__name__}: {detail})"


@contextmanager
def errors_as_click(db: str | None = None) -> Iterator[None]:
    """Expected failures become `click.ClickException` (one `Error:` line, exit 1)."""
    try:
        yield
    except JobcoreError as exc:
        raise click.ClickException(str(exc)) from None
    except apsw.Error as exc:
        raise click.ClickException(describe_driver_error(exc, db or "?")) from None
    except OSError as exc:
        if exc.errno not in _OS_FAILURES:
            raise
        where = f" ({exc.filename})" if exc.filename else ""
        raise click.ClickException(
            f"cannot write{where}: {_OS_FAILURES[exc.errno]}: {exc.strerror}"
        ) from None
