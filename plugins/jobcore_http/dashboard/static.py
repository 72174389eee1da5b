"""The dashboard's static files, served from the package (read once, fingerprinted)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from fastapi import APIRouter, HTTPException
from starlette.responses import Response

FOLDER = Path(__file__).parent / "static"
TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}

FILES: dict[str, tuple[bytes, str]] = {
    path.name: (path.read_bytes(), TYPES[path.suffix])
    for path in sorted(FOLDER.iterdir())
    if path.suffix in TYPES
}
ASSET_VERSION = hashlib.sha256(b"".join(body for body, _ in FILES.values())).hexdigest()[:12]

router = APIRouter(include_in_schema=False)


@router.get("/static/dashboard/{name}")
def static_file(name: str) -> Response:
    """A packaged CSS or JS file; cached for a year (URLs carry the content's fingerprint)."""
    found = FILES.get(name)
    if found is None:
        raise HTTPException(status_code=404, detail=f"no dashboard file {name!r}")
    body, media_type = found
    return Response(
        body,
        media_type=media_type,
        headers={"Cache-Control": "public, max-age=31536000, immutable"},
    )
