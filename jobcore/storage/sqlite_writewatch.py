"""Hear the WAL file being written (Linux inotify), so an idle worker need not poll.

Without it a worker with free slots looks for other processes' commits every
`wake_check_interval` (3 ms): ~300 wake-ups a second while nothing happens.
Every commit, by any process, writes its frames to the -wal file with write(2),
which inotify reports; the WAL-index header in -shm, whose change makes the
commit visible, is written through mmap, which it does not. So a write event
says "a commit is under way", not "it is visible" (a FULL commit syncs the WAL
between the two, for as long as the disk takes). The waiter therefore looks
every `wake_check_interval` while the file was written within the last
`QUIET_S` (sooner at first after a quiet spell: after `FIRST_STEP_S`, then half
the time since that first write), and after that ever less often: half the time
since the last write, so a commit that became visible late (a sync of seconds)
is still seen at most half as late again, and an idle worker wakes a handful of
times after each write, then not at all until the next one or its own deadline.

One inotify instance and one thread per process hear every watched file
(`_Watcher`); a waiter's `WalWriteWatch` only reads the times it noted. Where no
watch can be had (not Linux, `inotify_simple` missing, no inotify instance left,
no thread) or the watcher fails later, the waiter polls as before, and a warning
says why.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import sys
import threading
import time
from typing import Any

from jobcore.storage import powers

log = logging.getLogger("jobcore.worker")

QUIET_S = 0.5
"""While the WAL file was written within this long, a waiter looks every interval."""
FIRST_STEP_S = 0.0005
"""The first look after a write that ends a quiet spell."""
NAP_S = 0.02
"""After hearing writes, the thread reads again no sooner than this (the kernel folds
the writes in between into one event): a busy database wakes it ~50 times a second,
not once per commit. Waiters that look every interval meanwhile miss nothing; no
nap begins while a waiter sleeps, and a waiter that begins to sleep ends the nap."""

try:  # Linux only (the dependency is declared for Linux alone)
    from inotify_simple import INotify, flags
except (ImportError, OSError):  # pragma: no cover - other platforms
    INotify = None

_FILE_EVENTS = _DIR_EVENTS = _GONE = _OVERFLOW = 0
if INotify is not None:
    _FILE_EVENTS = flags.MODIFY
    _DIR_EVENTS = flags.CREATE | flags.MOVED_TO | flags.ONLYDIR
    _GONE = flags.IGNORED | flags.DELETE_SELF | flags.MOVE_SELF
    _OVERFLOW = flags.Q_OVERFLOW

_lock = threading.Lock()  # the watcher, its files and their watches
_watcher: _Watcher | None = None
_said_missing = False


class _WalFile:
    """One watched -wal file: when it was last written, and who waits on it."""

    def __init__(self, wal: str) -> None:
        self.wal = wal
        self.file_wd: int | None = None
        self.dir_wd: int | None = None  # only while the file is missing
        self.watches: set[WalWriteWatch] = set()
        self.last_write = time.monotonic()  # as if written now: look a while after starting
        self.first_at = self.last_write  # the first write after a quiet spell

    def wrote(self, now: float) -> None:
        if now - self.last_write >= QUIET_S:
            self.first_at = now
        self.last_write = now


class _Watcher:
    """This process's inotify instance and the thread reading it."""

    def __init__(self) -> None:
        self.failed = False
        self._closed = False
        self.files: dict[str, _WalFile] = {}
        self._wd_files: dict[int, set[_WalFile]] = {}
        self.napping = False  # the thread reads no events for now (`NAP_S`; under _lock)
        self._stop = False
        self._inotify = INotify()
        self._stop_r, self._stop_w = os.pipe()  # a byte: stop (`_stop`), or end the nap
        os.set_blocking(self._stop_w, False)
        try:
            self._thread = threading.Thread(target=self._main, name="jobcore-walwatch", daemon=True)
            self._thread.start()
        except BaseException:
            self._close_fds()
            raise

    # -- under _lock ------------------------------------------------------------------

    def add(self, watch: WalWriteWatch) -> None:
        wal_file = self.files.get(watch.wal)
        if wal_file is None:
            wal_file = self.files[watch.wal] = _WalFile(watch.wal)
            try:
                self._follow(wal_file)
            except BaseException:
                self._forget(wal_file)
                raise
        wal_file.watches.add(watch)
        watch.file = wal_file

    def remove(self, watch: WalWriteWatch) -> bool:
        """Stop telling `watch`; True when the watcher has nothing left to watch."""
        wal_file = watch.file
        wal_file.watches.discard(watch)
        if not wal_file.watches and self.files.get(wal_file.wal) is wal_file:
            self._forget(wal_file)
        return not self.files

    def _follow(self, wal_file: _WalFile) -> None:
        """Watch the -wal file, or its folder until the file is made (in that order, so
        a file made in between is heard either way)."""
        if wal_file.dir_wd is None:
            folder = os.path.dirname(wal_file.wal) or "."
            wal_file.dir_wd = self._add_wd(wal_file, folder, _DIR_EVENTS)
        try:
            wal_file.file_wd = self._add_wd(wal_file, wal_file.wal, _FILE_EVENTS)
        except FileNotFoundError:
            return
        self._drop_wd(wal_file, wal_file.dir_wd)  # no need: a file in use is not re-made
        wal_file.dir_wd = None

    def _forget(self, wal_file: _WalFile) -> None:
        del self.files[wal_file.wal]
        for wd in (wal_file.file_wd, wal_file.dir_wd):
            self._drop_wd(wal_file, wd)
        wal_file.file_wd = wal_file.dir_wd = None

    def _add_wd(self, wal_file: _WalFile, path: str, mask: int) -> int:
        wd: int = self._inotify.add_watch(path, mask)
        self._wd_files.setdefault(wd, set()).add(wal_file)
        return wd

    def _drop_wd(self, wal_file: _WalFile, wd: int | None) -> None:
        users = self._wd_files.get(wd) if wd is not None else None
        if wd is None or users is None:
            return
        users.discard(wal_file)
        if not users:
            del self._wd_files[wd]
            if not self._closed:  # (after a fork, the child's copy is)
                with contextlib.suppress(OSError):  # already gone with its file
                    self._inotify.rm_watch(wd)

    def _heard(self, events: list[Any]) -> list[_WalFile]:
        """The files written among `events` (a -wal file made anew counts)."""
        written: set[_WalFile] = set()
        for event in events:
            if event.mask & _OVERFLOW:  # events were lost: any file may have been written
                written.update(self.files.values())
                continue
            for wal_file in list(self._wd_files.get(event.wd, ())):
                if event.wd == wal_file.file_wd:
                    if event.mask & _GONE:
                        self._drop_wd(wal_file, wal_file.file_wd)
                        wal_file.file_wd = None
                        self._follow(wal_file)
                    written.add(wal_file)
                elif event.name == os.path.basename(wal_file.wal):  # in its folder
                    self._follow(wal_file)
                    written.add(wal_file)
        return list(written)

    # -- the thread -------------------------------------------------------------------

    def stop(self) -> None:
        if self._closed:
            return
        self._stop = True
        with contextlib.suppress(BlockingIOError):  # a full pipe wakes the thread anyway
            os.write(self._stop_w, b"s")
        self._thread.join(timeout=5)
        if not self._thread.is_alive():  # else it still reads them: leave them to exit
            self._close_fds()

    def _close_fds(self) -> None:
        self._closed = True
        self._inotify.close()
        os.close(self._stop_r)
        os.close(self._stop_w)

    def _main(self) -> None:
        poller, nap = select.poll(), select.poll()
        poller.register(self._inotify.fileno(), select.POLLIN)
        poller.register(self._stop_r, select.POLLIN)
        nap.register(self._stop_r, select.POLLIN)
        try:
            while True:
                ready = {fd for fd, _ in poller.poll()}
                if self._stop_r in ready and self._stopped():
                    return
                events = self._inotify.read(timeout=0)
                with _lock:
                    written = self._heard(events)
                    now = time.monotonic()
                    for wal_file in written:
                        wal_file.wrote(now)
                    waiting = [watch for f in written for watch in f.watches]
                    napping = bool(written) and not self._anyone_sleeps()
                    self.napping = napping
                for watch in waiting:
                    watch.wake()
                if napping:
                    ended = nap.poll(NAP_S * 1000)
                    self.napping = False
                    if ended and self._stopped():
                        return
        except Exception:
            log.warning(
                "watching WAL files for writes failed; looking for commits every "
                "wake_check_interval instead",
                exc_info=True,
            )
            self._fail()

    def _anyone_sleeps(self) -> bool:
        return any(watch.sleeping for f in self.files.values() for watch in f.watches)

    def end_nap(self) -> None:
        """A waiter begins to sleep: read its file's writes at once (`NAP_S`; under _lock)."""
        if self.napping:
            with contextlib.suppress(OSError):  # a full pipe has a wake-up waiting already
                os.write(self._stop_w, b"n")

    def _stopped(self) -> bool:
        """Empty the pipe: True if it was told to stop (else it only ended a nap)."""
        os.read(self._stop_r, 4096)
        return self._stop

    def _fail(self) -> None:
        global _watcher
        with _lock:
            self.failed = True
            if _watcher is self:
                _watcher = None  # the next watch starts a new one
            waiting = [watch for f in self.files.values() for watch in f.watches]
        for watch in waiting:
            watch.wake()


class WalWriteWatch:
    """One waiter's view of the process's watcher: `look_in` under `cond`, which the
    watcher notifies when the file is written while this waiter sleeps."""

    file: _WalFile

    def __init__(self, wal: str, cond: threading.Condition) -> None:
        self.wal = wal
        self._cond = cond
        self.sleeping = False  # under `cond`
        self._watcher: _Watcher | None = None

    @classmethod
    def open(cls, db_path: str, cond: threading.Condition) -> powers.WriteWatch:
        """A watch of `db_path`'s WAL file, or `powers.Polling` where none can be had."""
        global _watcher, _said_missing
        if INotify is None:
            if sys.platform.startswith("linux") and not _said_missing:
                _said_missing = True
                log.warning(
                    "inotify_simple is not installed: idle workers look for commits every "
                    "wake_check_interval; reinstall jobcore-queue from its checkout"
                )
            return powers.Polling()
        watch = cls(db_path + "-wal", cond)
        idle: _Watcher | None = None
        try:
            with _lock:
                if _watcher is None:
                    _watcher = _Watcher()
                try:
                    _watcher.add(watch)
                except BaseException:
                    if not _watcher.files:  # made for this watch alone: stop it
                        idle, _watcher = _watcher, None
                    raise
                watch._watcher = _watcher
        except (OSError, RuntimeError) as exc:  # no instance, no watch or no thread left
            if idle is not None:
                idle.stop()
            log.warning(
                "cannot watch %s for writes (%s); looking for commits every "
                "wake_check_interval instead (see fs.inotify.max_user_instances and "
                "max_user_watches)",
                watch.wal,
                exc,
            )
            return powers.Polling()
        return watch

    def look_in(self, remaining: float, interval: float) -> float:
        """Seconds until the waiter looks for a commit (up to `remaining`)."""
        watcher = self._watcher
        if watcher is None or watcher.failed:
            return min(remaining, interval)
        now = time.monotonic()
        since = now - self.file.last_write
        if since >= QUIET_S:
            if not self.sleeping:  # a write wakes it sooner: the thread must be reading
                with _lock:
                    self.sleeping = True
                    watcher.end_nap()
            return min(remaining, since / 2)
        self.sleeping = False
        return min(remaining, interval, max(FIRST_STEP_S, (now - self.file.first_at) / 2))

    def wake(self) -> None:
        with self._cond:
            watcher = self._watcher
            if self.sleeping or watcher is None or watcher.failed:
                self.sleeping = False
                self._cond.notify_all()

    def close(self) -> None:
        global _watcher
        with _lock:
            watcher, self._watcher = self._watcher, None
            if watcher is None or not watcher.remove(self):
                return
            if _watcher is watcher:  # nothing left to watch: the next watch starts anew
                _watcher = None
        watcher.stop()


def _forget_in_child() -> None:
    """After fork: the watcher's thread is not in the child; its watches poll there."""
    global _lock, _watcher
    _lock = threading.Lock()  # another thread may have held it at the fork
    watcher, _watcher = _watcher, None
    if watcher is not None:
        watcher.failed = True
        watcher._close_fds()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
