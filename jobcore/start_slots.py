"""Start slots: where a worker's executors note the attempts they begin.

One small file per worker process beside the SQLite database (`<db>-starts/`),
made of fixed-size entries. Before a handler begins, its executor writes the
attempt's lease id (and the start time) into a free entry: one `pwrite`, no
fsync. The page cache outlives the process, so when a handler takes its worker
down (SIGKILL, a segfault, the OOM killer) the sweep reads there which
attempts had begun and charges exactly those; a prefetched attempt that no
executor took is in no entry and costs nothing (DESIGN §6, crash accounting).
A machine that loses power loses the file with it: its attempts are then
released uncharged, which is right, since no handler caused that.

An entry stays taken until the attempt it names is done: its outcome committed,
or its lease lost (`InFlight.remove` frees it). Executors run ahead of the
loop's commits, so an attempt whose handler returned may wait for its commit
while its executor runs others; had its entry been reused, a crash in that
window would release it as never started, though its handler ran. A worker
holds at most `concurrency + prefetch` attempts, and so that many entries; past
`MAX_ENTRIES` a start is marked in the database instead (slower, as correct).
A freed entry keeps its old lease id until reused: harmless, since a lease id
names one claim, and that claim is over.

Each process makes a file of its own (`<digest of the worker id>-<nonce>`) and
holds an exclusive `flock` on it while it lives: a worker restarted with the
same `--worker-id` never overwrites what its crashed predecessor noted. A file
nobody holds belongs to a dead process: the sweep marks started every claim it
names that is still claimed (those handlers began), and deletes it once that
commits (`jobcore.storage.sqlite_starts`). A worker that stops (it did not crash)
deletes its own file: attempts it leaves unrecorded are then given back uncharged,
as DESIGN §6 charges only a handler that takes its worker down. An entry whose
attempt was given back before its handler began is blanked (`clear`).

This is the crash-accounting rule for stores on this machine's disk; a store
without start slots (PostgreSQL, the hub's agents) marks starts in a group
commit before the handler begins (`jobcore.inflight`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from jobcore import gil_pwrite

log = logging.getLogger("jobcore.worker")

SLOT = 64  # bytes per entry: "<lease id> <start ms>", padded, newline-terminated
BLANK = b" " * (SLOT - 1) + b"\n"  # an entry naming no attempt
MAX_ENTRIES = 16384  # per process (1 MiB): more than `concurrency + prefetch` (<= 10,000)


def folder(db_path: str) -> Path:
    """The start-slot folder of the database at `db_path` (the same for every process)."""
    return Path(os.path.realpath(db_path) + "-starts")


def digest(worker: str) -> str:
    """The start-slot files of `worker` (any worker id) are named after this."""
    return hashlib.sha256(worker.encode("utf-8", "replace")).hexdigest()[:32]


def files_of(db_path: str, worker: str) -> list[Path]:
    """Every start-slot file of `worker`: one per process that ran with its id (and left
    its file behind), plus the unsuffixed one of earlier versions."""
    name = digest(worker)
    try:
        with os.scandir(folder(db_path)) as entries:
            return [
                Path(entry.path)
                for entry in entries
                if entry.name == name or entry.name.startswith(name + "-")
            ]
    except OSError:  # no folder (no worker noted anything), or not this user's to read
        return []


def encode(lease_id: str, started_ms: int) -> bytes | None:
    """One entry's bytes, or None when the lease id does not fit (or could not be read back)."""
    text = f"{lease_id} {started_ms}"
    if len(text) >= SLOT or not lease_id or not lease_id.isascii() or " " in lease_id:
        return None
    if "\n" in lease_id or "\0" in lease_id:
        return None
    return text.encode("ascii").ljust(SLOT - 1) + b"\n"


def decode(data: bytes) -> dict[str, int]:
    """`{lease_id: started_ms}` of every filled entry in a start-slot file's bytes."""
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


def _read(path: Path) -> dict[str, int]:
    try:
        return decode(path.read_bytes())
    except OSError:  # gone meanwhile, or not this user's to read
        return {}


def _read_fd(fd: int) -> dict[str, int]:
    chunks, offset = [], 0
    while chunk := os.pread(fd, 1 << 16, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return decode(b"".join(chunks))


def read(db_path: str, worker: str) -> dict[str, int]:
    """What the executors of every process with `worker`'s id noted (`{lease_id:
    started_ms}`); {} without a file."""
    begun: dict[str, int] = {}
    for path in files_of(db_path, worker):
        begun.update(_read(path))
    return begun


@dataclass
class DeadFile:
    """The start-slot file of a process that is gone, locked by the sweep that found it."""

    path: Path
    fd: int
    begun: dict[str, int]

    def remove(self) -> None:
        """Delete it (what it named is in the database now) and let go of it. A file that
        cannot be deleted is read again by a later sweep: what it names is marked already."""
        try:
            self.path.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("cannot delete %s (%s); a later sweep tries again", self.path, exc)
        finally:
            self.release()

    def release(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


def dead_files(db_path: str) -> list[DeadFile]:
    """The start-slot files under `db_path`'s folder that no live process holds, each
    locked until `remove` or `release`. Files of earlier versions (unsuffixed, never
    locked) are not among them."""
    try:
        with os.scandir(folder(db_path)) as entries:
            names = [entry.name for entry in entries if "-" in entry.name]
    except OSError:
        return []
    dead: list[DeadFile] = []
    for name in names:
        path = folder(db_path) / name
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue  # gone meanwhile, or not ours to read
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.fstat(fd).st_nlink == 0:  # deleted by another sweep meanwhile
                raise BlockingIOError
            dead.append(DeadFile(path, fd, _read_fd(fd)))  # what is locked, not a path again
        except OSError:  # held: its process lives
            os.close(fd)
    return dead


class StartSlots:
    """This process's start-slot file, open (and locked) until `close`."""

    def __init__(self, db_path: str, worker: str) -> None:
        parent = folder(db_path)
        for tries_left in range(4, -1, -1):
            # private to the user running workers (lease ids are fences), and never through a
            # symlink planted where the file goes
            parent.mkdir(mode=0o700, exist_ok=True)
            self.path = parent / f"{digest(worker)}-{os.urandom(6).hex()}"
            try:
                flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
                self._fd = os.open(self.path, flags, 0o600)
            except (FileNotFoundError, FileExistsError):  # the empty folder went meanwhile,
                # or the name is taken (a planted symlink is never opened)
                if not tries_left:
                    raise
                continue
            try:  # a sweep may have taken it for a dead process's file before this lock
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if os.fstat(self._fd).st_nlink > 0:
                    break
            except BlockingIOError:
                pass
            except OSError:
                os.close(self._fd)
                raise
            os.close(self._fd)
            if not tries_left:
                raise OSError(errno.EAGAIN, "start-slot file taken by a sweep")
        self._warned = False
        self._lock = threading.Lock()  # no write after `close` (the fd number may be reused)
        self._closed = False
        self._free: list[int] = []  # entries whose attempt is done
        self._used = 0  # entries ever taken: 0 .. _used-1

    @classmethod
    def open(cls, db_path: str, worker: str) -> StartSlots | None:
        """This process's slots, or None (logged) when its file cannot be made."""
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

    def note(self, lease_id: str, started_ms: int) -> int | None:
        """Write the attempt about to begin into a free entry: the entry, to `free` once
        the attempt is done; None if it could not be written (the caller then marks the
        start in the database instead)."""
        data = encode(lease_id, started_ms)
        if data is None:
            return None
        with self._lock:
            if self._closed:
                return None
            if self._free:
                entry = self._free.pop()
            elif self._used < MAX_ENTRIES:
                entry, self._used = self._used, self._used + 1
            else:
                return None
            try:
                written = gil_pwrite.pwrite(self._fd, data, entry * SLOT)  # keeps the GIL
            except OSError as exc:
                self._free.append(entry)
                if not self._warned:
                    self._warned = True
                    log.warning(
                        "cannot write start slot in %s (%s); marking starts in the database",
                        self.path,
                        os.strerror(exc.errno or errno.EIO),
                    )
                return None
            if written != SLOT:
                self._free.append(entry)
                return None
        return entry

    def clear(self, entry: int) -> None:
        """Blank `entry` and reuse it: the attempt it named was given back before its
        handler began, and no sweep is to charge it, recorded or not."""
        with self._lock:
            if not self._closed:
                with contextlib.suppress(OSError):  # then the sweep charges it: at most that
                    gil_pwrite.pwrite(self._fd, BLANK, entry * SLOT)
            self._free.append(entry)

    def free(self, entry: int) -> None:
        """The attempt `entry` names is done (recorded, or its lease lost): reuse it."""
        with self._lock:
            self._free.append(entry)

    def held(self) -> int:
        """Entries naming attempts not done yet."""
        with self._lock:
            return self._used - len(self._free)

    def close(self) -> None:
        """Delete the file: the worker stops (it did not crash). An attempt it names whose
        outcome is unrecorded (the database took no writes) is then given back by the
        sweep once its lease expires, without an attempt spent: DESIGN §6 charges only a
        handler that takes its worker down, and a stop gives unfinished jobs back free."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            held = self._used - len(self._free)
            self.path.unlink(missing_ok=True)  # while locked: no sweep reads it half-gone
            with contextlib.suppress(OSError):
                os.close(self._fd)  # lets go of the lock
        if held:
            log.warning(
                "%d attempt(s) stopped with their outcomes unrecorded: the sweep gives them"
                " back once their leases expire, without an attempt spent, and they run again",
                held,
            )
        with contextlib.suppress(OSError):
            self.path.parent.rmdir()  # the last worker out leaves no empty folder behind


__all__ = [
    "MAX_ENTRIES",
    "SLOT",
    "DeadFile",
    "StartSlots",
    "dead_files",
    "decode",
    "digest",
    "encode",
    "files_of",
    "folder",
    "read",
]
