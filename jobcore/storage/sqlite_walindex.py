"""A cheap first answer to "has anyone committed?" on a WAL database, before asking SQLite.

`PRAGMA data_version` opens a read transaction (file-lock system calls on the
-shm file); an idle worker asks every few milliseconds, and that is most of
what idling costs. SQLite rewrites the WAL-index header at the start of the
-shm file on every commit (https://www.sqlite.org/walformat.html, "The WAL-Index
Header"), so while those bytes read as they did before the last PRAGMA, nobody
has committed since. The PRAGMA stays the answer: the header only lets a check
skip it, and never for longer than `RECHECK_S`.
"""

from __future__ import annotations

import os
import time
import weakref

HEADER_BYTES = 96
"""The two copies of the WAL-index header (48 bytes each) at the start of the -shm file."""
RECHECK_S = 0.1
"""However unchanged the header reads, `PRAGMA data_version` runs at least this often."""


class WalIndexHeader:
    """Reads the WAL-index header of one database; one per thread's connection."""

    def __init__(self, db_path: str) -> None:
        self._path = db_path + "-shm"
        self._fd: int | None = None
        self._opened = False
        self._seen: bytes | None = None  # read just before the last data_version check
        self._checked_at = 0.0  # monotonic time of that check

    def unchanged(self) -> bool:
        """True: nobody committed since the last check, which was recent (skip the PRAGMA).

        False: check now (the header is noted first, so a commit landing between this
        read and the PRAGMA is still seen by the PRAGMA).
        """
        header = self._read()
        now = time.monotonic()
        if header is not None and header == self._seen and now - self._checked_at < RECHECK_S:
            return True
        self._seen, self._checked_at = header, now
        return False

    def _read(self) -> bytes | None:
        if not self._opened:
            self._opened = True  # one attempt: without the file, every check asks SQLite
            if not hasattr(os, "pread"):
                return None
            try:
                self._fd = os.open(self._path, os.O_RDONLY)
            except OSError:
                return None
            weakref.finalize(self, os.close, self._fd)
        if self._fd is None:
            return None
        try:
            header = os.pread(self._fd, HEADER_BYTES, 0)
        except OSError:
            return None
        return header if len(header) == HEADER_BYTES else None
