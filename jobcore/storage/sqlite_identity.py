"""Noticing that a database path no longer names the file a storage opened.

A restore (`mv backup.db jobcore.db`) or a reset (`rm -r jobcore.db*`: the database, its sidecars and start slots) while a worker
runs leaves the worker on the old file: its connections keep it open, so its
claims and outcomes go to a file nobody else reads, and jobs enqueued at the path
stay pending for good. Comparing the path's device and inode with the ones seen
when the first connection opened (one `stat`) tells.
"""

from __future__ import annotations

import os


class FileIdentity:
    """The device and inode of a database file, taken once, compared on demand."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._seen: tuple[int, int] | None = None

    def remember(self) -> None:
        """Take the file's identity, once (at the first connection's opening)."""
        if self._seen is None:
            try:
                st = os.stat(self.path)
            except OSError:
                return
            self._seen = (st.st_dev, st.st_ino)

    def changed(self) -> str | None:
        """Why the path no longer names the file first opened (None: it still does)."""
        if self._seen is None:
            return None
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return f"database {self.path} was deleted while it was open"
        except OSError:
            return None  # cannot tell (a permission change, say): not a replacement
        if (st.st_dev, st.st_ino) != self._seen:
            return f"database {self.path} was replaced by another file while it was open"
        return None
