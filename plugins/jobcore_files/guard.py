"""jobcore's own files (database and sidecars, config file, agent cache) are never a job's target.

Compared by what is on disk, not by the path a job gave: a folder entered or
an entry touched is refused when its device and inode are those of an owned
file or folder, or when it is an owned name in the owned file's folder (the
database's `-wal`, `-shm`, `-journal` and other `NAME-…` files SQLite makes,
which may not exist yet, and the hub's artifact store `NAME.artifacts`). A files root
at or inside an owned folder (the agent's cache, the hub's artifact store beside the
database or named by `[plugins.http] artifacts_dir`) is refused.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict

from jobcore import Config, PermanentError
from jobcore.config import DEFAULT_CONFIG_FILE
from jobcore.owned import Kind, owned
from jobcore.storage.sqlite import sqlite_path

DEFAULT_DB = "jobcore.db"
# the hub's artifact store (executables agents run) when its database is not a SQLite file;
# beside a SQLite database it is `<db>.artifacts`, refused as a name made from the database's
DEFAULT_ARTIFACTS = "jobcore.artifacts"
SQLITE_SIDECARS = ("-wal", "-shm", "-journal")

Inode = tuple[int, int]


def per_user_folders() -> list[str]:
    """jobcore's folders in the user's home: the agents' cache (executables they run by hash,
    trusted once cached) and the hub's state (the dashboard's session signing key)."""
    home = os.path.expanduser("~")
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(home, ".local", "state")
    return [os.path.join(cache, "jobcore"), os.path.join(state, "jobcore")]


class _HubArtifacts(BaseModel):
    """The one `[plugins.http]` setting the files plugin reads (the http plugin owns the rest)."""

    model_config = ConfigDict(extra="ignore")

    artifacts_dir: Any = None


def hub_artifacts_dir(config: Config) -> str | None:
    """The hub's artifact store when `[plugins.http] artifacts_dir` (or
    `JOBCORE_HTTP_ARTIFACTS_DIR`) names one; the http plugin judges the value itself."""
    value = config.plugin_settings("http", _HubArtifacts).artifacts_dir
    return value if isinstance(value, str) and value and "\0" not in value else None


@dataclass
class Guard:
    """What no files job may touch, as inodes and as names in folders (by the folder's inode)."""

    inodes: dict[Inode, str] = field(default_factory=dict)
    names: dict[tuple[int, int, str], str] = field(default_factory=dict)
    prefixes: dict[Inode, list[tuple[str, str]]] = field(default_factory=dict)
    folders: list[str] = field(default_factory=list)  # real paths of owned folders
    pending: list[tuple[str, Kind]] = field(default_factory=list)  # their folder is missing

    @classmethod
    def current(cls, config: Config | None = None) -> Guard:
        """Everything registered in `jobcore.owned`, the configured database and config file,
        and the defaults in the working directory (`./jobcore.db`, `./jobcore.toml`) that a
        later process started there would use."""
        guard = cls()
        sources: list[tuple[str, Kind]] = [
            (DEFAULT_DB, "database"),
            (DEFAULT_CONFIG_FILE, "config"),
            (DEFAULT_ARTIFACTS, "folder"),
        ]
        if config is not None:
            db = sqlite_path(config.core.db)
            if db and not db.startswith(":memory:") and not db.startswith("file:"):
                sources.append((db, "database"))
            if config.file_name:
                sources.append((config.file_name, "config"))
            store = hub_artifacts_dir(config)
            if store:
                sources.append((store, "folder"))
        sources.extend((folder, "folder") for folder in per_user_folders())
        sources.extend(owned())
        for path, kind in sources:
            guard.add(os.path.abspath(path), kind)
            real = os.path.realpath(path)  # SQLite keeps sidecars beside the file a link names
            if real != os.path.abspath(path):
                guard.add(real, kind)
        return guard

    def add(self, path: str, kind: Kind) -> None:
        what = {
            "database": "jobcore's database",
            "config": "jobcore's config file",
            "file": "jobcore's own file",
            "folder": "jobcore's own folder",
        }[kind]
        folder, name = os.path.split(path)
        if kind == "folder":
            self._own_folder(path)
        elif kind == "database":  # the hub's artifact store beside it: no root inside it
            self._own_folder(path + ".artifacts")
        try:
            where = os.stat(folder)
        except OSError:
            self.pending.append((path, kind))  # looked at again once a job made the folder
            return
        key = (where.st_dev, where.st_ino)
        self.names[(*key, name)] = f"{what} {path}"
        with_sidecars = [name]
        if kind == "database":
            self.prefixes.setdefault(key, []).append((f"{name}-", f"a sidecar of {what} {path}"))
            self.names[(*key, f"{name}.artifacts")] = (
                f"the hub's artifact store beside {what} {path}"
            )
            with_sidecars += [name + suffix for suffix in SQLITE_SIDECARS]
        for each in with_sidecars:
            try:
                info = os.stat(os.path.join(folder, each))
            except OSError:
                continue
            self.inodes[(info.st_dev, info.st_ino)] = f"{what} {path}"

    def _own_folder(self, path: str) -> None:
        real = os.path.realpath(path)
        if real not in self.folders:
            self.folders.append(real)

    def refuse(
        self, shown: str, parent: os.stat_result, name: str, entry: os.stat_result | None
    ) -> None:
        """Raise `PermanentError` if `name` in folder `parent` (now `entry`) is jobcore's own."""
        if self.pending:  # a folder this walk just made may hold one of them
            waiting, self.pending = self.pending, []
            for path, kind in waiting:
                self.add(path, kind)
        why = self.names.get((parent.st_dev, parent.st_ino, name))
        if why is None:
            for prefix, what in self.prefixes.get((parent.st_dev, parent.st_ino), ()):
                if name.startswith(prefix):
                    why = what
                    break
        if why is None and entry is not None:
            why = self.inodes.get((entry.st_dev, entry.st_ino))
        if why is not None:
            raise PermanentError(f"{shown} is {why}; files jobs never touch jobcore's own files")

    def refuse_root(self, root: str) -> None:
        """Raise `PermanentError` if the files root (a real path) is inside an owned folder."""
        for folder in self.folders:
            if os.path.commonpath([root, folder]) == folder:
                raise PermanentError(
                    f"the files root {root} is inside jobcore's own folder {folder}; "
                    "set [plugins.files] root to a folder of its own"
                )
