"""jobcore plugin `files`: `create_file` and `delete_file`, confined to a root folder."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from jobcore import Config, Job, JobContext, JobType, Payload, PermanentError, hookimpl
from jobcore_files.paths import (
    FilesSettings,
    check_path,
    files_root,
    lexical_target,
    resolved_target,
)
from jobcore_files.writer import fsync_dir, sha256, write_atomic

__all__ = ["FilesSettings", "files_root", "resolved_target", "write_atomic"]


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


def create_file(payload: CreateFile, ctx: JobContext) -> dict[str, Any]:
    root = files_root(ctx.config)
    target = resolved_target(root, payload.path)
    data = payload.data()
    written = write_atomic(root, target, data, overwrite=payload.overwrite)
    return {"path": payload.path, "bytes": len(data), "sha256": sha256(data), "written": written}


def delete_file(payload: DeleteFile, ctx: JobContext) -> dict[str, Any]:
    root = files_root(ctx.config)
    target = resolved_target(root, payload.path)
    if target.is_dir() and not target.is_symlink():
        raise PermanentError(f"{payload.path} is a folder; delete_file removes files only")
    try:
        target.unlink()
    except FileNotFoundError:
        if payload.require_exists:
            raise PermanentError(
                f"{payload.path} does not exist (require_exists is true)"
            ) from None
        return {"path": payload.path, "deleted": False}
    fsync_dir(target.parent)
    return {"path": payload.path, "deleted": True}


@hookimpl
def jobcore_register_job_types(register: Callable[[JobType], None]) -> None:
    register(
        JobType(
            name="create_file",
            payload_model=CreateFile,
            handler=create_file,
            check=lambda payload, config: check_path(payload.path, config),
            description="write a file atomically under the files root",
        )
    )
    register(
        JobType(
            name="delete_file",
            payload_model=DeleteFile,
            handler=delete_file,
            check=lambda payload, config: check_path(payload.path, config),
            description="delete a file under the files root",
        )
    )


@hookimpl
def jobcore_reconcile(job: Job, config: Config) -> list[str] | None:
    if job.type not in ("create_file", "delete_file"):
        return None
    root = files_root(config)
    target: Path = lexical_target(root, job.payload["path"])
    if job.type == "delete_file":
        return [f"{job.payload['path']} exists again"] if target.exists() else []
    if not target.exists():
        return [f"{job.payload['path']} is missing"]
    expected = sha256(CreateFile.model_validate(job.payload).data())
    actual = sha256(target.read_bytes())
    if actual != expected:
        return [
            f"{job.payload['path']} content differs (sha256 {actual[:12]}…, expected {expected[:12]}…)"
        ]
    return []
