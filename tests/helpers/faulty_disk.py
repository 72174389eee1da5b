"""Loaded with JOBCORE_PLUGINS=faulty_disk: SQLite's default file system, failing every write
with an I/O error while FAULTY_DISK=1, or while the file named by FAULTY_DISK_WHILE exists (a
running process's disk fails and recovers), a real SQLITE_IOERR through SQLite's VFS layer."""

from __future__ import annotations

import os

import apsw

BASE = apsw.vfs_names()[0]


class FaultyFile(apsw.VFSFile):  # type: ignore[misc]
    def xWrite(self, data: bytes, offset: int) -> None:
        flag = os.environ.get("FAULTY_DISK_WHILE")
        if os.environ.get("FAULTY_DISK") == "1" or (flag and os.path.exists(flag)):
            raise apsw.IOError("write failed on the faulty disk")
        super().xWrite(data, offset)


class FaultyVFS(apsw.VFS):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__("faulty", base=BASE, makedefault=True)

    def xOpen(self, name: str | None, flags: list[int]) -> FaultyFile:
        return FaultyFile(BASE, name, flags)


VFS = FaultyVFS()
