"""Confining paths to the files root: lexically at enqueue, through symlinks at run time."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from jobcore import Config, InvalidPayload, PermanentError


class FilesSettings(BaseModel):
    """`[plugins.files]` / `JOBCORE_FILES_*`."""

    model_config = ConfigDict(extra="forbid")

    root: str = "."  # relative to the worker's working directory


def files_root(config: Config) -> Path:
    """The configured root as an absolute path (symlinks in it resolved)."""
    return Path(os.path.realpath(config.plugin_settings("files", FilesSettings).root))


def lexical_target(root: Path, path: str) -> Path:
    """`path` joined to `root` without touching the disk; rejects `..` escapes and outside absolutes."""
    if not path or "\x00" in path:
        raise InvalidPayload("path: must be a non-empty path without NUL bytes")
    joined = Path(os.path.normpath(os.path.join(root, path)))
    if joined != root and root not in joined.parents:
        raise InvalidPayload(
            f"path: {path!r} is outside the files root {root}; use a path inside it "
            "(set [plugins.files] root or JOBCORE_FILES_ROOT to move the root)"
        )
    if joined == root:
        raise InvalidPayload(f"path: {path!r} is the files root itself, not a file inside it")
    return joined


def check_path(path: str, config: Config) -> None:
    """Enqueue-time check (JobType.check)."""
    lexical_target(files_root(config), path)


def resolved_target(root: Path, path: str) -> Path:
    """The target after following symlinks in its folders; a link leading out fails permanently."""
    try:
        target = lexical_target(root, path)
    except InvalidPayload as exc:
        raise PermanentError(str(exc)) from None
    real_parent = Path(os.path.realpath(target.parent))
    if real_parent != root and root not in real_parent.parents:
        raise PermanentError(
            f"{path!r} leads outside the files root {root} through a symlink (to {real_parent})"
        )
    real = real_parent / target.name
    if real.is_symlink():
        pointee = Path(os.path.realpath(real))
        if root not in pointee.parents:
            raise PermanentError(
                f"{path!r} is a symlink leading outside the files root (to {pointee})"
            )
    return real
