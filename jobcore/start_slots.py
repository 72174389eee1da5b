"""Start slots: where a worker's executors note the attempt each is about to run.

One small file per worker beside the SQLite database (`<db>-starts/`), one
fixed-size slot per executor. Before a handler begins, its executor writes the
attempt's lease id (and the start time) into its own slot: one `pwrite`, no
fsync. The page cache outlives the process, so when a handler takes its worker
down (SIGKILL, a segfault, the OOM killer) the sweep reads there which
attempts had begun and charges exactly those; a prefetched attempt that no
executor took is in no slot and costs nothing (DESIGN §6, crash accounting).
A machine that loses power loses the file with it: its attempts are then
released uncharged, which is right, since no handler caused that.

This is the crash-accounting rule for stores on this machine's disk; a store
without start slots (PostgreSQL, the hub's agents) marks starts in a group
commit before the handler begins (`jobcore.inflight`).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import socket
import threading
from pathlib import Path

from jobcore import gil_pwrite

log = logging.getLogger("jobcore.worker")

SLOT = 64  # bytes per executor: "<lease id> <start ms>", padded, newline-terminated


def folder(db_path: str) -> Path:
    """The start-slot folder of the database at `db_path` (the same for every process)."""
    return Path(os.path.realpath(db_path) + "-starts")


def file_of(db_path: str, worker: str) -> Path:
    """The start-slot file of `worker` (any worker id: its name is a digest of it)."""
    return folder(db_path) / hashlib.sha256(worker.encode("utf-8", "replace")).hexdigest()[:32]


def encode(lease_id: str, started_ms: int) -> bytes | None:
    """One slot's bytes, or None when the lease id does not fit (or could not be read back)."""
    text = f"{lease_id} {started_ms}"
    if len(text) >= SLOT or not lease_id or not lease_id.isascii() or " " in lease_id:
        return None
    if "\n" in lease_id or "\0" in lease_id:
        return None
    return text.encode("ascii").ljust(SLOT - 1) + b"\n"


def decode(data: bytes) -> dict[str, int]:
    """`{lease_id: started_ms}` of every filled slot in a start-slot file's bytes."""
    begun: dict[str, int] = {}
    for offset in range(0, len(data) - SLOT + 1, SLOT):
        parts = data[offset : offset + SLOT].split()
        if len(parts) != 2:
            continue  # empty, or torn by a crash in the middle of a write
        try:
            lease_id, started = parts[0].decode("ascii"), int(parts[1])
        except (UnicodeDecodeError, ValueError):
            continue
        begun[lease_id] = started
    return begun


def read(db_path: str, worker: str) -> dict[str, int]:
    """What `worker`'s executors noted last (`{lease_id: started_ms}`); {} without a file."""
    try:
        return decode(file_of(db_path, worker).read_bytes())
    except FileNotFoundError:
        return {}


def remove_if_dead(db_path: str, worker: str) -> None:
    """Delete the file of a worker of this host whose process is gone (default worker ids
    `host:pid:...`); others' files are left alone (their owner removes them at exit)."""
    host, _, rest = worker.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        file_of(db_path, worker).unlink(missing_ok=True)
    except OSError:
        return  # alive, but another user's


class StartSlots:
    """A worker's own start-slot file, open for writing until `close` removes it."""

    def __init__(self, db_path: str, worker: str) -> None:
        self.path = file_of(db_path, worker)
        for tries_left in (1, 0):
            # private to the user running workers (lease ids are fences), and never through a
            # symlink planted where the file goes (it would truncate what the link names)
            self.path.parent.mkdir(mode=0o700, exist_ok=True)
            try:
                flags = os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
                self._fd = os.open(self.path, flags, 0o600)
                break
            except FileNotFoundError:  # another worker removed the empty folder meanwhile
                if not tries_left:
                    raise
        self._warned = False
        self._lock = threading.Lock()  # no write after `close` (the fd number may be reused)
        self._closed = False

    @classmethod
    def open(cls, db_path: str, worker: str) -> StartSlots | None:
        """The worker's slots, or None (logged) when its file cannot be made."""
        try:
            return cls(db_path, worker)
        except OSError as exc:
            log.warning(
                "cannot create start slots under %s (%s); starts are marked in the"
                " database instead (slower)",
                folder(db_path),
                os.strerror(exc.errno or errno.EIO),
            )
            return None

    def note(self, slot: int, lease_id: str, started_ms: int) -> bool:
        """Write the attempt about to begin into executor `slot`'s place; False if it could
        not be written (the caller then marks the start in the database instead)."""
        data = encode(lease_id, started_ms)
        if data is None:
            return False
        try:
            with self._lock:
                if self._closed:
                    return False
                written = gil_pwrite.pwrite(self._fd, data, slot * SLOT)  # keeps the GIL
        except OSError as exc:
            if not self._warned:
                self._warned = True
                log.warning(
                    "cannot write start slot in %s (%s); marking starts in the database",
                    self.path,
                    os.strerror(exc.errno or errno.EIO),
                )
            return False
        return written == SLOT

    def close(self) -> None:
        """Remove the file: the worker ended without a crash, so no attempt it leaves
        unrecorded (its leases expire) took it down, and none is charged."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self.path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.path.parent.rmdir()  # the last worker out leaves no empty folder behind


__all__ = ["SLOT", "StartSlots", "decode", "encode", "file_of", "folder", "read"]
