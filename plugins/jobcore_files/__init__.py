"""jobcore plugin `files`: `create_file` and `delete_file`, confined to a root folder."""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from jobcore import Config, Job, JobContext, JobType, Payload, PermanentError, Queue, hookimpl
from jobcore_files.confined import Walker
from jobcore_files.guard import Guard
from jobcore_files.paths import (
    FilesSettings,
    check_path,
    files_root,
    missing_root,
    relative_parts,
    target_key,
)
from jobcore_files.writer import (
    Place,
    check_place,
    check_target,
    delete_place,
    digest_place,
    exists_place,
    sha256,
    write_atomic,
    write_file,
    write_place,
)

log = logging.getLogger("jobcore.files")

__all__ = [
    "FilesSettings",
    "check_path",
    "check_target",
    "files_root",
    "resolved_target",
    "target_key",
    "write_atomic",
    "write_file",
]


class CreateFile(Payload):
    path: str = Field(min_length=1, description="relative to the files root")
    content: str
    encoding: Literal["utf-8", "base64"] = "utf-8"
    overwrite: bool = False

    @model_validator(mode="after")
    def _decodable(self) -> CreateFile:
        self.data()
        return self

    def data(self) -> bytes:
        if self.encoding == "base64":
            try:
                return base64.b64decode(self.content, validate=True)
            except (binascii.Error, ValueError):
                raise ValueError("content is not valid base64") from None
        return self.content.encode("utf-8")


class DeleteFile(Payload):
    path: str = Field(min_length=1)
    require_exists: bool = False


def resolved_target(root: Path, path: str) -> Path:
    """Compatibility: `root / path` after `check_place` (prefer `check_target` and `write_file`)."""
    parts = relative_parts(root, path)
    check_place(Place(root, parts, Walker(), Guard.current()))
    return root.joinpath(*parts)


def create_file(payload: CreateFile, ctx: JobContext) -> dict[str, Any]:
    data = payload.data()
    written = write_place(Place.of(ctx.config, payload.path), data, overwrite=payload.overwrite)
    return {"path": payload.path, "bytes": len(data), "sha256": sha256(data), "written": written}


def delete_file(payload: DeleteFile, ctx: JobContext) -> dict[str, Any]:
    if delete_place(Place.of(ctx.config, payload.path)):
        return {"path": payload.path, "deleted": True}
    if payload.require_exists:
        raise PermanentError(f"{payload.path} does not exist (require_exists is true)")
    return {"path": payload.path, "deleted": False}


def _key(payload: dict[str, Any], config: Config) -> str | None:
    path = payload.get("path")
    return target_key(path, config) if isinstance(path, str) else None


@hookimpl
def jobcore_configure(config: Config) -> None:
    """Validate `[plugins.files]` / `JOBCORE_FILES_*` at start (a bad one is one `Error:`)."""
    config.plugin_settings("files", FilesSettings)


@hookimpl
def jobcore_worker_started(worker: str, queue: Queue) -> None:
    """Warn once at a worker's start when a configured files root does not exist."""
    problem = missing_root(queue.config)
    if problem:
        log.warning("%s", problem)


@hookimpl
def jobcore_register_job_types(register: Callable[[JobType], None]) -> None:
    register(
        JobType(
            name="create_file",
            payload_model=CreateFile,
            handler=create_file,
            check=lambda payload, config: check_path(payload.path, config),
            reconcile_key=_key,
            description="write a file atomically under the files root",
        )
    )
    register(
        JobType(
            name="delete_file",
            payload_model=DeleteFile,
            handler=delete_file,
            check=lambda payload, config: check_path(payload.path, config),
            reconcile_key=_key,
            description="delete a file under the files root",
        )
    )


@hookimpl
def jobcore_reconcile(job: Job, config: Config) -> list[str] | None:
    """Compare a file with the job that last wrote or deleted it (`reconcile_key` picks that job)."""
    if job.type not in ("create_file", "delete_file"):
        return None
    path = job.payload["path"]
    try:
        place = Place.of(config, path)
        if job.type == "delete_file":
            return [f"{path} exists again"] if exists_place(place) else []
        data = CreateFile.model_validate(job.payload).data()
        found = digest_place(place, len(data))
    except PermanentError as exc:
        return [str(exc)]
    if found is None:
        return [f"{path} is missing"]
    size, actual = found
    if actual is None:
        return [f"{path} content differs ({size} bytes, expected {len(data)})"]
    expected = sha256(data)
    if actual != expected:
        return [f"{path} content differs (sha256 {actual[:12]}…, expected {expected[:12]}…)"]
    return []
