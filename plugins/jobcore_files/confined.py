"""Walking a path under the files root through held folder descriptors, never through a symlink.

A path is resolved once, one component at a time, each step opened relative to
the folder descriptor of the step before: with `openat2(RESOLVE_BENEATH |
RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)` where the kernel has it, else with
`open(O_DIRECTORY | O_NOFOLLOW, dir_fd=…)`. Every later action (create, rename,
unlink, read) names only the last component, relative to the held parent, so a
folder swapped for a symlink between a check and a use cannot move it outside
the root: the swap makes the next step fail instead.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal, Protocol

from jobcore import PermanentError

Resolver = Literal["auto", "openat2", "walk"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC
_O_PATH = getattr(os, "O_PATH", 0)  # Linux: a descriptor that opens nothing, only holds it
_HOLD_FLAGS = _O_PATH | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_PROC_FD = "/proc/self/fd"
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_CONFINED = _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS
# openat2 is 437 on every architecture with the unified syscall table (Linux >= 5.6)
_RETRIES = 20
_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437, "arm64": 437, "riscv64": 437}


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


class _Openat2:
    """`openat2(2)` through libc's `syscall`, when this kernel and architecture have it."""

    def __init__(self) -> None:
        self.number = _SYS_OPENAT2.get(platform.machine()) if sys.platform == "linux" else None
        self._syscall = None
        if self.number is not None:
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                self._syscall = libc.syscall
                self._syscall.restype = ctypes.c_long
            except (OSError, AttributeError):
                self.number = None
        self._available: bool | None = None

    def __call__(self, dir_fd: int, name: str, flags: int, resolve: int) -> int:
        assert self._syscall is not None and self.number is not None
        how = _OpenHow(flags, 0, resolve)
        path = os.fsencode(name)
        while True:
            fd = self._syscall(
                ctypes.c_long(self.number),
                ctypes.c_int(dir_fd),
                ctypes.c_char_p(path),
                ctypes.byref(how),
                ctypes.c_size_t(ctypes.sizeof(how)),
            )
            if fd >= 0:
                return int(fd)
            code = ctypes.get_errno()
            if code not in (errno.EINTR, errno.EAGAIN):  # EAGAIN: a racing rename; try again
                raise OSError(code, os.strerror(code), name)

    @property
    def available(self) -> bool:
        """True when a probe call works (no ENOSYS, no seccomp refusal)."""
        if self._available is None:  # executors may probe at once: set it only when known
            works = False
            if self.number is not None:
                try:
                    os.close(self(-100, "/", _DIR_FLAGS & ~os.O_NOFOLLOW, 0))  # AT_FDCWD
                    works = True
                except OSError:
                    pass
            self._available = works
        return self._available


openat2 = _Openat2()


def choose(resolver: Resolver) -> Literal["openat2", "walk"]:
    """The mechanism `resolver` stands for on this machine."""
    if resolver == "walk":
        return "walk"
    if openat2.available:
        return "openat2"
    if resolver == "openat2":
        raise PermanentError(
            "[plugins.files] resolve is 'openat2' but this kernel does not offer openat2 "
            "(Linux >= 5.6); use 'auto' or 'walk'"
        )
    return "walk"


class Visit(Protocol):
    """Sees each folder `Walker.parent` enters (`fd` None: about to be made) and may refuse it."""

    def __call__(self, fd: int | None, shown: str, parent_fd: int, name: str) -> None: ...


class Walker:
    """Opens folders one component at a time below a held folder descriptor."""

    def __init__(self, resolver: Resolver = "auto") -> None:
        self.mechanism = choose(resolver)

    def step(self, dir_fd: int, name: str, shown: str) -> int:
        """Open folder `name` in `dir_fd`; a symlink is a `PermanentError` naming `shown`.

        With O_DIRECTORY the kernel answers ENOTDIR for a symlink as for a file, so
        the entry is looked at again; one that turned into a folder meanwhile (it is
        being swapped) is opened again, a few times at most.
        """
        for _ in range(_RETRIES):
            try:
                if self.mechanism == "openat2":
                    return openat2(dir_fd, name, _DIR_FLAGS, _CONFINED)
                return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno == errno.EXDEV:
                    raise PermanentError(f"{shown} leads outside the files root") from None
                if exc.errno == errno.ELOOP:
                    raise PermanentError(symlink_refused(shown)) from None
                if exc.errno != errno.ENOTDIR:
                    raise
                info = lstat_at(dir_fd, name)
                if info is None:
                    raise FileNotFoundError(errno.ENOENT, "no such folder", shown) from None
                if stat.S_ISLNK(info.st_mode):
                    raise PermanentError(symlink_refused(shown)) from None
                if not stat.S_ISDIR(info.st_mode):
                    raise NotADirectoryError(errno.ENOTDIR, "not a folder", shown) from None
        raise PermanentError(f"{shown} keeps changing between a folder and something else")

    @contextmanager
    def parent(
        self, root_fd: int, parts: list[str], *, create: bool, visit: Visit | None = None
    ) -> Iterator[int | None]:
        """The held folder that contains `parts[-1]` (None when a folder is missing).

        `create` makes missing folders (mode 0777 & ~umask) and fsyncs each new entry.
        `visit(fd, shown, parent_fd, name)` sees every folder entered, to refuse some.
        """
        fd = os.dup(root_fd)
        try:
            for index, name in enumerate(parts[:-1]):
                shown = "/".join(parts[: index + 1])
                try:
                    child = self.step(fd, name, shown)
                except FileNotFoundError:
                    if not create:
                        os.close(fd)
                        fd = -1
                        break
                    if visit is not None:
                        visit(None, shown, fd, name)
                    try:
                        os.mkdir(name, 0o777, dir_fd=fd)
                    except FileExistsError:
                        pass  # made by someone else meanwhile: opened (and checked) below
                    else:
                        os.fsync(fd)
                    child = self.step(fd, name, shown)
                try:
                    if visit is not None:
                        visit(child, shown, fd, name)
                except BaseException:
                    os.close(child)
                    raise
                os.close(fd)
                fd = child
            yield fd if fd >= 0 else None
        finally:
            if fd >= 0:
                os.close(fd)


def symlink_refused(shown: str) -> str:
    return (
        f"{shown} is a symlink; files jobs never follow symlinks "
        "(one could lead outside the files root)"
    )


def lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    """The entry `name` in `dir_fd` itself (a symlink is not followed); None if absent."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def open_regular(dir_fd: int, name: str, shown: str) -> tuple[int, os.stat_result] | None:
    """Open `name` in `dir_fd` for reading, only if it is a regular file; None if absent.

    Nothing but a regular file is ever opened for reading, so no device is opened
    (no controlling terminal acquired, no open side effect), no FIFO blocks and no
    socket answers ENXIO: the entry is held first with `O_PATH | O_NOFOLLOW` (which
    opens neither a device nor what a symlink names) and `fstat`ed; a symlink, FIFO,
    socket or device is a `PermanentError`. Only a regular file is then opened
    read-only: the very inode held, through /proc/self/fd, else by its name in the held
    folder, checked to be the same inode. Without `O_PATH` the entry is looked at
    with `fstatat` first. Every open has `O_NOCTTY`.
    """
    for _ in range(_RETRIES):
        held = -1
        try:
            if _O_PATH:
                try:
                    held = os.open(name, _HOLD_FLAGS, dir_fd=dir_fd)
                except FileNotFoundError:
                    return None
                info = os.fstat(held)
            else:
                found = lstat_at(dir_fd, name)
                if found is None:
                    return None
                info = found
            if not stat.S_ISREG(info.st_mode):
                raise PermanentError(not_regular(shown, info))
            fd = _reopen(held, dir_fd, name, shown, info)
        finally:
            if held >= 0:
                os.close(held)
        if fd is not None:
            return fd, os.fstat(fd)
    raise PermanentError(f"{shown} keeps being replaced while it is opened")


def _reopen(held: int, dir_fd: int, name: str, shown: str, info: os.stat_result) -> int | None:
    """`name`, a regular file of inode `info`, opened read-only; None if it was replaced."""
    proc = f"{_PROC_FD}/{held}"
    try:  # stat, never open, to learn that this /proc is ours and names the held inode
        ours = held >= 0 and _same_inode(os.stat(proc), info)
    except OSError:
        ours = False
    try:
        if ours:
            fd = os.open(proc, _READ_FLAGS & ~os.O_NOFOLLOW)  # the magic link is the point
        else:
            fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None  # removed meanwhile: looked at again
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO):
            return None  # a symlink or a socket swapped in: looked at again
        raise
    opened = os.fstat(fd)
    if _same_inode(opened, info) and stat.S_ISREG(opened.st_mode):
        return fd
    os.close(fd)
    return None


def _same_inode(one: os.stat_result, other: os.stat_result) -> bool:
    return (one.st_dev, one.st_ino) == (other.st_dev, other.st_ino)


def not_regular(shown: str, info: os.stat_result) -> str:
    if stat.S_ISDIR(info.st_mode):
        return f"{shown} is a folder, not a file"
    if stat.S_ISLNK(info.st_mode):
        return symlink_refused(shown)
    kind = (
        "a FIFO"
        if stat.S_ISFIFO(info.st_mode)
        else "a socket"
        if stat.S_ISSOCK(info.st_mode)
        else "a device"
    )
    return f"{shown} is {kind}, not a regular file; files jobs touch regular files only"
