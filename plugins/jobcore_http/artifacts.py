"""Artifact store routes: `POST /api/artifacts` (admin) and `GET /api/artifacts/{sha256}`.

Executables for `exec` jobs, stored by their SHA-256 in one folder (default:
next to the database, `<db>.artifacts/`). An upload streams into a temporary
file while it is hashed, then is renamed into place, so a reader never sees a
partial file and two uploads of the same bytes are harmless. The hub mounts
the router with its own auth dependencies:
`app.include_router(artifacts_router(folder, admin=…, read=…))`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import FileResponse, JSONResponse

from jobcore.storage.sqlite import sqlite_path
from jobcore_http.models import ErrorOut

SHA256 = re.compile(r"^[0-9a-f]{64}$")
DEFAULT_MAX_BYTES = 256 * 1024 * 1024


def default_artifacts_dir(db_url: str) -> Path:
    """`<db path>.artifacts` for a SQLite path or URL; `./jobcore.artifacts` otherwise."""
    path = sqlite_path(db_url)
    if not path or path == ":memory:":
        return Path("jobcore.artifacts")
    return Path(path + ".artifacts")


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def artifacts_router(
    directory: str | Path,
    *,
    admin: Any = None,
    read: Any = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> APIRouter:
    """The two routes; `admin`/`read` are FastAPI dependencies enforcing those scopes (None: open)."""
    folder = Path(directory)
    router = APIRouter(tags=["artifacts"])
    admin_deps = [Depends(admin)] if admin is not None else []
    read_deps = [Depends(read)] if read is not None else []

    errors: dict[int | str, dict[str, Any]] = {
        code: {"model": ErrorOut} for code in (400, 401, 403, 404, 413)
    }

    @router.post(
        "/api/artifacts",
        dependencies=admin_deps,
        status_code=201,
        responses={200: {"description": "already stored"}, **errors},
    )
    async def upload_artifact(request: Request) -> Any:
        """Store the request body; answers `{sha256, size}` (201 new, 200 already stored)."""
        folder.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256()
        size = 0
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".upload.", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as handle:
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > max_bytes:
                        return _error(
                            413, f"artifact is over the {max_bytes}-byte limit (artifact_max_bytes)"
                        )
                    digest.update(chunk)
                    handle.write(chunk)
                handle.flush()
                os.fsync(handle.fileno())
            if size == 0:
                return _error(400, "empty upload: send the file's bytes as the request body")
            sha = digest.hexdigest()
            target = folder / sha
            existed = target.is_file()
            if not existed:
                os.chmod(tmp, 0o644)
                os.replace(tmp, target)
                tmp = ""
            return JSONResponse({"sha256": sha, "size": size}, status_code=200 if existed else 201)
        finally:
            if tmp:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)

    @router.get(
        "/api/artifacts/{sha256}",
        dependencies=read_deps,
        response_model=None,
        responses={200: {"content": {"application/octet-stream": {}}}, **errors},
    )
    def download_artifact(sha256: str) -> FileResponse | JSONResponse:
        """The stored bytes of `sha256` (lowercase hex); 404 when unknown."""
        if not SHA256.match(sha256):
            return _error(400, f"{sha256!r} is not a lowercase hex SHA-256 (64 characters)")
        path = folder / sha256
        if not path.is_file():
            return _error(404, f"no artifact {sha256}; upload it with `jobcore artifacts upload`")
        return FileResponse(path, media_type="application/octet-stream")

    return router


__all__ = ["artifacts_router", "default_artifacts_dir"]
