"""Confined, atomic, durable file writes and deletes under the files root.

Every action is relative to a folder descriptor held from the root down (see
`confined`): a file without a name (`O_TMPFILE`, else a temp file
`.jc-<random>.tmp`) in the target folder, fsync, then `link` (never clobbers)
or `rename` (overwrite, from a temp name it gets once complete) into place and
an fsync of the folder. Only regular files are read, replaced or deleted; symlinks, FIFOs,
sockets, devices and jobcore's own files fail permanently, and only a regular file is ever
opened for reading (`confined.open_regular`); every open has `O_NOCTTY`.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from jobcore import Config, PermanentError
from jobcore.errors import JobcoreError
from jobcore_files.confined import Walker, lstat_at, not_regular, open_regular
from jobcore_files.guard import Guard
from jobcore_files.paths import DEFAULT_ROOT, FilesSettings, files_root, relative_parts

_ROOT_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOCTTY | os.O_CLOEXEC
_O_TMPFILE = getattr(os, "O_TMPFILE", 0)  # Linux: a file with no name until linked
_PROC_FD = "/proc/self/fd"
_CHUNK = 1 << 20


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, _ROOT_FLAGS)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FilesRootMissing(JobcoreError):
    """The configured files root is missing: retried, so creating it lets the job through."""


@dataclass
class Place:
    """A job's path below the root, with how to walk it and what it must never touch."""

    root: Path
    parts: list[str]
    walker: Walker
    guard: Guard
    make_root: bool = True  # the default root is made on demand, a configured one never

    @property
    def shown(self) -> str:
        return "/".join(self.parts)

    @property
    def name(self) -> str:
        return self.parts[-1]

    @classmethod
    def of(cls, config: Config, path: str, field: str = "path") -> Place:
        root = files_root(config)
        settings = config.plugin_settings("files", FilesSettings)
        return cls(
            root,
            relative_parts(root, path, field),
            Walker(settings.resolve),
            Guard.current(config),
            make_root=settings.root == DEFAULT_ROOT,
        )

    @contextlib.contextmanager
    def parent(self, *, create: bool) -> Iterator[tuple[int, os.stat_result] | None]:
        """The held folder of the target and its stat; None when a folder on the way is missing."""
        root = str(self.root)
        self.guard.refuse_root(root)
        if create and self.make_root:
            os.makedirs(root, mode=0o700, exist_ok=True)
        elif create and not os.path.isdir(root):  # the operator's root: never made here
            raise FilesRootMissing(
                f"the files root {root} ([plugins.files] root / JOBCORE_FILES_ROOT) does not "
                f"exist or is not a folder: create it (mkdir -p {root}, writable by the "
                "worker's user) or set the root to a folder that exists"
            )
        try:
            root_fd = os.open(root, _ROOT_FLAGS)
        except FileNotFoundError:
            if create:
                raise
            yield None
            return
        try:
            root_stat = os.fstat(root_fd)
            self.guard.refuse(root, root_stat, "", root_stat)

            def visit(fd: int | None, shown: str, parent_fd: int, name: str) -> None:
                entry = os.fstat(fd) if fd is not None else None
                self.guard.refuse(shown, os.fstat(parent_fd), name, entry)

            with self.walker.parent(root_fd, self.parts, create=create, visit=visit) as fd:
                yield None if fd is None else (fd, os.fstat(fd))
        finally:
            os.close(root_fd)


def _same_content(dir_fd: int, name: str, shown: str, data: bytes) -> tuple[bool, int | None]:
    """(whether regular file `name` holds exactly `data`, its mode); (False, None) if absent."""
    opened = open_regular(dir_fd, name, shown)
    if opened is None:
        return False, None
    fd, info = opened
    try:
        mode = stat.S_IMODE(info.st_mode) & 0o777  # never setuid/setgid on a job's content
        if info.st_size != len(data):
            return False, mode
        with os.fdopen(os.dup(fd), "rb") as handle:
            return handle.read(len(data) + 1) == data, mode
    finally:
        os.close(fd)


def _write_temp(dir_fd: int, data: bytes, mode: int | None) -> str:
    """A fsynced temp file in `dir_fd` holding `data`; `mode` None means 0666 & ~umask."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC
    while True:
        temp = _temp_name()
        try:
            fd = os.open(temp, flags, 0o600 if mode is not None else 0o666, dir_fd=dir_fd)
            break
        except FileExistsError:
            continue
    try:
        _fill(fd, data, mode)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        raise
    finally:
        os.close(fd)
    return temp


def _temp_name() -> str:
    return f".jc-{secrets.token_hex(8)}.tmp"  # short: a 255-byte target name still fits


def _fill(fd: int, data: bytes, mode: int | None) -> None:
    with os.fdopen(fd, "wb", closefd=False) as handle:
        handle.write(data)
    if mode is not None:
        os.fchmod(fd, mode)  # a replaced file keeps its mode
    os.fsync(fd)


def _write_unnamed(dir_fd: int, data: bytes, mode: int | None) -> int | None:
    """An fsynced file without a name (`O_TMPFILE`) in `dir_fd`; None where there is none.

    A worker killed while writing leaves nothing behind: the file gets a name
    only once it is complete (`_link_fd`).
    """
    if not _O_TMPFILE or not os.path.isdir(_PROC_FD):
        return None
    try:
        fd = os.open(
            ".",
            _O_TMPFILE | os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC,
            0o600 if mode is not None else 0o666,
            dir_fd=dir_fd,
        )
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
            return None  # this file system (or kernel) has no O_TMPFILE
        raise
    try:
        nameable = os.stat(f"{_PROC_FD}/{fd}").st_ino == os.fstat(fd).st_ino
    except OSError:
        nameable = False
    if not nameable:  # /proc is another process namespace's: `_link_fd` could not name it
        os.close(fd)
        return None
    try:
        _fill(fd, data, mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _link_fd(fd: int, dir_fd: int, name: str) -> None:
    """Give the unnamed file `fd` the name `name` in `dir_fd` (FileExistsError if taken)."""
    os.link(f"{_PROC_FD}/{fd}", name, dst_dir_fd=dir_fd, follow_symlinks=True)


def _put(dir_fd: int, name: str, data: bytes, mode: int | None, *, overwrite: bool) -> None:
    """`name` in `dir_fd` holds `data` at once; FileExistsError if it exists and not `overwrite`."""
    fd = _write_unnamed(dir_fd, data, mode)
    if fd is None:
        temp = _write_temp(dir_fd, data, mode)
    else:
        try:
            if not overwrite:
                _link_fd(fd, dir_fd, name)  # never clobbers
                return
            while True:  # rename needs a name: the complete file gets one just before
                temp = _temp_name()
                try:
                    _link_fd(fd, dir_fd, temp)
                    break
                except FileExistsError:
                    continue
        finally:
            os.close(fd)
    try:
        if overwrite:
            os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        else:
            os.link(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=dir_fd)


def write_place(place: Place, data: bytes, *, overwrite: bool) -> bool:
    """Write `data` so readers see the old file or the new one, never a part.

    Returns True if written, False if identical content was already there. With
    `overwrite` false an existing different file is a `PermanentError`.
    """
    name, shown = place.name, place.shown
    with place.parent(create=True) as held:
        assert held is not None
        dir_fd, dir_stat = held
        place.guard.refuse(shown, dir_stat, name, lstat_at(dir_fd, name))
        same, mode = _same_content(dir_fd, name, shown, data)
        if same:
            return False  # an earlier attempt (or someone else) already wrote exactly this
        if mode is not None and not overwrite:
            raise _exists(shown)
        try:
            _put(dir_fd, name, data, mode, overwrite=overwrite)
        except FileExistsError:
            if _same_content(dir_fd, name, shown, data)[0]:
                return False
            raise _exists(shown) from None
        os.fsync(dir_fd)
    return True


def _exists(shown: str) -> PermanentError:
    return PermanentError(
        f"{shown} already exists with different content; enqueue with overwrite: true to replace it"
    )


def delete_place(place: Place) -> bool:
    """Unlink the regular file at `place`; False if it was not there."""
    name, shown = place.name, place.shown
    try:
        with place.parent(create=False) as held:
            if held is None:
                return False
            dir_fd, dir_stat = held
            entry = lstat_at(dir_fd, name)
            if entry is None:
                return False
            place.guard.refuse(shown, dir_stat, name, entry)
            if not stat.S_ISREG(entry.st_mode):
                raise PermanentError(not_regular(shown, entry) + "; delete_file removes files only")
            try:
                os.unlink(name, dir_fd=dir_fd)
            except FileNotFoundError:
                return False
            os.fsync(dir_fd)
            return True
    except NotADirectoryError:
        return False  # a file where a folder would be: nothing to delete below it


def digest_place(place: Place, size: int) -> tuple[int, str | None] | None:
    """(size, sha256) of the regular file at `place`, None if absent; the sha256 is None,
    and nothing read, when the size is not `size`. Anything else is a PermanentError."""
    try:
        with place.parent(create=False) as held:
            if held is None:
                return None
            opened = open_regular(held[0], place.name, place.shown)
            if opened is None:
                return None
            fd, info = opened
            digest = hashlib.sha256()
            try:
                if info.st_size != size:
                    return info.st_size, None  # a huge (or sparse) file is never read through
                while chunk := os.read(fd, _CHUNK):
                    digest.update(chunk)
            finally:
                os.close(fd)
            return info.st_size, digest.hexdigest()
    except NotADirectoryError:
        return None


def exists_place(place: Place) -> bool:
    """Whether anything (a file, folder, link …) is at `place`, walking no symlink."""
    try:
        with place.parent(create=False) as held:
            return held is not None and lstat_at(held[0], place.name) is not None
    except NotADirectoryError:
        return False


def check_place(place: Place) -> None:
    """Fail now (PermanentError) if a write to `place` would be refused, creating nothing."""
    try:
        with place.parent(create=False) as held:
            if held is None:
                return
            dir_fd, dir_stat = held
            entry = lstat_at(dir_fd, place.name)
            place.guard.refuse(place.shown, dir_stat, place.name, entry)
            if entry is not None and not stat.S_ISREG(entry.st_mode):
                raise PermanentError(not_regular(place.shown, entry))
    except NotADirectoryError as exc:  # a file (or FIFO …) where a folder must be: never writable
        raise PermanentError(
            f"{exc.filename} is not a folder, so {place.shown} cannot be written below it"
        ) from None


# -- the API other plugins use (jobcore_claude writes `target_path` through these) -------


def write_file(
    config: Config, path: str, data: bytes, *, overwrite: bool, field: str = "path"
) -> bool:
    """Write `data` atomically to `path` under the files root (see `write_place`)."""
    return write_place(Place.of(config, path, field), data, overwrite=overwrite)


def check_target(config: Config, path: str, field: str = "path") -> None:
    """Fail permanently now if `path` could never be written (before an expensive step)."""
    check_place(Place.of(config, path, field))


def write_atomic(root: Path, target: Path, data: bytes, *, overwrite: bool) -> bool:
    """Compatibility: `write_file` for a `target` below `root` (see `resolved_target`)."""
    parts = relative_parts(root, str(target))
    return write_place(Place(root, parts, Walker(), Guard.current()), data, overwrite=overwrite)
