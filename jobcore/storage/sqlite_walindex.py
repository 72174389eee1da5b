"""A cheap first answer to "has anyone committed?" on a WAL database, before asking SQLite.

`PRAGMA data_version` opens a read transaction (file-lock system calls on the
-shm file); an idle worker asks every few milliseconds, and that is most of
what idling costs. SQLite rewrites the WAL-index header at the start of the
-shm file on every commit (https://www.sqlite.org/walformat.html, "The WAL-Index
Header"), so while those bytes read as they did before the last PRAGMA, nobody
has committed since. The PRAGMA stays the answer: the header only lets a check
skip it, and never for longer than `RECHECK_S`.

The -shm file is read through one descriptor per file and process (`ShmFile`),
held by every connection jobcore opens on the database (`open_holding_shm`, taken
before the connection opens) and closed once the last of them is gone: SQLite
locks -shm with POSIX record locks, which belong to the process, and closing *any*
descriptor of the file drops every one of them (another process could then begin
writing while one of ours is mid-transaction, or delete -wal and -shm under a live
connection: https://www.sqlite.org/howtocorrupt.html, section 2.2). A descriptor
per thread, closed when its thread ended, did exactly that. A connection opened
outside jobcore (not adopted by `Queue.enqueue(conn=...)`) holds none.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import TypeVar

HEADER_BYTES = 96
"""The two copies of the WAL-index header (48 bytes each) at the start of the -shm file."""
RECHECK_S = 0.1
"""However unchanged the header reads, `PRAGMA data_version` runs at least this often."""

C = TypeVar("C")

_lock = threading.Lock()
_open: dict[str, ShmFile] = {}


def _new_lock_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # another thread may have held it at the fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_in_child)


class ShmFile:
    """This process's read-only descriptor of one -shm file, shared by every holder.

    Each holder `acquire`s it and `release`s it once; the descriptor is opened on the
    first read and closed when the last holder releases it.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._users = 0
        self._fd: int | None = None
        self._tried = False  # one attempt per opening: without the file, checks ask SQLite

    @classmethod
    def acquire(cls, db_path: str) -> ShmFile:
        path = os.path.realpath(db_path) + "-shm"
        with _lock:
            shm = _open.get(path)
            if shm is None:
                shm = _open[path] = cls(path)
            shm._users += 1
            return shm

    def release(self) -> None:
        with _lock:
            self._users -= 1
            if self._users > 0:
                return
            del _open[self.path]
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # no connection of ours on the database is left to lose its locks

    def read(self) -> bytes | None:
        """The WAL-index header, or None when it cannot be read."""
        fd = self._fd
        if fd is None:
            with _lock:
                if not self._tried and self._users > 0 and hasattr(os, "pread"):
                    self._tried = True
                    with contextlib.suppress(OSError):  # no file: every check asks SQLite
                        self._fd = os.open(self.path, os.O_RDONLY)
                fd = self._fd
            if fd is None:
                return None
        try:
            header = os.pread(fd, HEADER_BYTES, 0)
        except OSError:
            return None
        return header if len(header) == HEADER_BYTES else None


def open_holding_shm(db_path: str, opener: Callable[[], C]) -> C:
    """`opener()`'s connection to `db_path`, holding the process's -shm descriptor from
    before it opens until it is collected."""
    shm = ShmFile.acquire(db_path)
    try:
        conn = opener()
    except BaseException:
        shm.release()
        raise
    hold(conn, shm)
    return conn


def hold(conn: object, shm: ShmFile) -> None:
    """Release `shm` once `conn` is collected (not at interpreter exit: threads may still
    be inside SQLite then, and the process's end closes everything anyway)."""
    weakref.finalize(conn, shm.release).atexit = False


class WalIndexHeader:
    """Reads the WAL-index header of one database; one per thread's connection."""

    def __init__(self, db_path: str) -> None:
        self._shm = ShmFile.acquire(db_path)
        hold(self, self._shm)
        self._seen: bytes | None = None  # read just before the last data_version check
        self._checked_at = 0.0  # monotonic time of that check

    def unchanged(self) -> bool:
        """True: nobody committed since the last check, which was recent (skip the PRAGMA).

        False: check now (the header is noted first, so a commit landing between this
        read and the PRAGMA is still seen by the PRAGMA).
        """
        header = self._shm.read()
        now = time.monotonic()
        if header is not None and header == self._seen and now - self._checked_at < RECHECK_S:
            return True
        self._seen, self._checked_at = header, now
        return False
