"""Atomic, durable file writes: temp file in the target folder, fsync, rename, fsync the folder."""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path

from jobcore import PermanentError


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_parents(root: Path, folder: Path) -> None:
    """Create `folder` and its missing parents, never through a symlink leading out of `root`."""
    missing = []
    current = folder
    while not current.exists():
        missing.append(current)
        current = current.parent
    real = Path(os.path.realpath(current))
    if real != root and root not in real.parents:
        raise PermanentError(f"folder {current} leads outside the files root {root}")
    for path in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(path)
        fsync_dir(path.parent)


def write_atomic(root: Path, target: Path, data: bytes, *, overwrite: bool) -> bool:
    """Write `data` to `target` so readers see the old file or the new one, never a part.

    Returns True if the file was written, False if identical content was already
    there. With `overwrite` false an existing different file is a `PermanentError`.
    """
    make_parents(root, target.parent)
    if target.is_dir():
        raise PermanentError(f"{target} is a folder, not a file")
    if target.exists() and target.read_bytes() == data:
        return False  # an earlier attempt (or someone else) already wrote exactly this
    fd, temp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    temp = Path(temp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if overwrite:
            os.replace(temp, target)
        else:
            try:
                os.link(temp, target)  # atomic and never clobbers
            except FileExistsError:
                if target.read_bytes() == data:
                    return False
                raise PermanentError(
                    f"{target} already exists with different content; "
                    "enqueue with overwrite: true to replace it"
                ) from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
    fsync_dir(target.parent)
    return True
