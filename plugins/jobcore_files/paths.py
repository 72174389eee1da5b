"""The files root and the lexical form of a job's path: checked at enqueue, walked at run time."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator

from jobcore import Config, InvalidPayload, PermanentError

DEFAULT_ROOT = "jobcore-files"
NAME_MAX = 255  # bytes in one file name (Linux, macOS and most file systems)
PATH_MAX = 4096  # bytes in a whole path with its final NUL (Linux); longer ones no tool can name


class FilesSettings(BaseModel):
    """`[plugins.files]` / `JOBCORE_FILES_*`."""

    model_config = ConfigDict(extra="forbid")

    # a folder of its own, relative to the worker's working directory; made (0700) on demand
    root: str = DEFAULT_ROOT
    # how paths are walked: openat2 where the kernel has it, else an O_NOFOLLOW walk
    resolve: Literal["auto", "openat2", "walk"] = "auto"

    @field_validator("root")
    @classmethod
    def _root(cls, value: str) -> str:
        if not value:  # e.g. FILES_ROOT=${UNSET} in a unit file: never the working directory
            raise ValueError(
                "is empty; set it to a folder (an empty root would be the worker's working "
                "directory, where jobcore.db and jobcore.toml live), or leave it unset for "
                f"the default ./{DEFAULT_ROOT}"
            )
        if "\0" in value:
            raise ValueError("contains a NUL character, which no path can hold")
        return value


def files_root(config: Config) -> Path:
    """The configured root as an absolute path (symlinks in it resolved)."""
    return Path(os.path.realpath(config.plugin_settings("files", FilesSettings).root))


def missing_root(config: Config) -> str | None:
    """Why a configured files root is unusable because it does not exist, else None.

    The default root (`jobcore-files` in the working directory) is made on demand; a root
    set by the operator is theirs to create (with the owner and mode they want).
    """
    configured = config.plugin_settings("files", FilesSettings).root
    if configured == DEFAULT_ROOT:
        return None
    root = files_root(config)
    if root.is_dir():
        return None
    what = "is not a folder" if root.exists() else "does not exist"
    return (
        f"the files root {root} ([plugins.files] root / JOBCORE_FILES_ROOT) {what}: "
        f"create it (mkdir -p {root}, writable by the worker's user) or set the root to a "
        "folder that exists; create_file and delete_file jobs fail until then"
    )


def lexical_target(root: Path, path: str, field: str = "path") -> Path:
    """`path` joined to `root` without touching the disk.

    Rejects `..` escapes, absolute paths outside the root, NUL bytes, file
    names longer than NAME_MAX bytes and whole paths (root included) of
    PATH_MAX bytes or more, naming `field`.
    """
    if not path or "\x00" in path:
        raise InvalidPayload(f"{field}: must be a non-empty path without NUL bytes")
    joined = Path(os.path.normpath(os.path.join(root, path)))
    if joined != root and root not in joined.parents:
        raise InvalidPayload(
            f"{field}: {path!r} is outside the files root {root}; use a path inside it "
            "(set [plugins.files] root or JOBCORE_FILES_ROOT to move the root)"
        )
    if joined == root:
        raise InvalidPayload(f"{field}: {path!r} is the files root itself, not a file inside it")
    for name in joined.relative_to(root).parts:
        size = len(name.encode("utf-8", "surrogatepass"))
        if size > NAME_MAX:
            raise InvalidPayload(
                f"{field}: the name {name[:40]!r}… is {size} bytes; file systems allow "
                f"at most {NAME_MAX} bytes per file or folder name"
            )
    size = len(str(joined).encode("utf-8", "surrogatepass"))
    if size >= PATH_MAX:
        raise InvalidPayload(
            f"{field}: {path[:40]!r}… makes a path of {size} bytes in the files root {root}; "
            f"a path may have at most {PATH_MAX - 1} bytes (no program could open a file "
            "deeper than that by its name): use a shorter path"
        )
    return joined


def relative_parts(root: Path, path: str, field: str = "path") -> list[str]:
    """The components of `path` below `root`; a bad path is a `PermanentError` at run time."""
    try:
        return list(lexical_target(root, path, field).relative_to(root).parts)
    except InvalidPayload as exc:
        raise PermanentError(str(exc)) from None


def check_path(path: str, config: Config, field: str = "path") -> None:
    """Enqueue-time check (JobType.check)."""
    lexical_target(files_root(config), path, field)


def target_key(path: str, config: Config) -> str | None:
    """What a job writing or deleting `path` leaves its mark on (for `reconcile`)."""
    root = files_root(config)
    try:
        return "file:" + "/".join(lexical_target(root, path).relative_to(root).parts)
    except InvalidPayload:
        return None
