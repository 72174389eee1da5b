"""The hub's artifact routes on a real uvicorn server on 127.0.0.1."""

from __future__ import annotations

import hashlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

fastapi = pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")

from fastapi import FastAPI, Header, HTTPException  # noqa: E402
from jobcore_http.artifacts import artifacts_router, default_artifacts_dir  # noqa: E402
from testenv import wait_for  # noqa: E402


def admin_only(authorization: str = Header(default="")) -> None:
    if authorization != "Bearer admin":
        raise HTTPException(status_code=403, detail="needs admin")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    app = FastAPI()
    app.include_router(artifacts_router(tmp_path / "store", admin=admin_only, max_bytes=1000))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    instance = uvicorn.Server(config)
    thread = threading.Thread(target=instance.run, daemon=True)
    thread.start()
    wait_for(lambda: instance.started)
    yield f"http://127.0.0.1:{port}"
    instance.should_exit = True
    thread.join(5)


def test_upload_then_download_by_sha256(server: str, tmp_path: Path) -> None:
    data = b"#!/bin/sh\necho solver\n"
    digest = hashlib.sha256(data).hexdigest()
    admin = {"Authorization": "Bearer admin"}
    first = httpx.post(f"{server}/api/artifacts", content=data, headers=admin)
    assert first.status_code == 201 and first.json() == {"sha256": digest, "size": len(data)}
    again = httpx.post(f"{server}/api/artifacts", content=data, headers=admin)
    assert again.status_code == 200
    got = httpx.get(f"{server}/api/artifacts/{digest}")
    assert got.status_code == 200 and got.content == data
    assert [p.name for p in (tmp_path / "store").iterdir()] == [digest]


def test_bad_requests_get_clear_errors(server: str, tmp_path: Path) -> None:
    admin = {"Authorization": "Bearer admin"}
    assert httpx.post(f"{server}/api/artifacts", content=b"x").status_code == 403
    too_big = httpx.post(f"{server}/api/artifacts", content=b"x" * 1001, headers=admin)
    assert too_big.status_code == 413 and "limit" in too_big.json()["error"]
    missing = httpx.get(f"{server}/api/artifacts/{'0' * 64}")
    assert missing.status_code == 404 and "upload" in missing.json()["error"]
    assert httpx.get(f"{server}/api/artifacts/nothex").status_code == 400
    assert not list((tmp_path / "store").glob(".upload.*"))


def test_default_folder_is_beside_the_database() -> None:
    assert default_artifacts_dir("/data/jobs.db") == Path("/data/jobs.db.artifacts")
    assert default_artifacts_dir("sqlite:///data/jobs.db") == Path("/data/jobs.db.artifacts")
