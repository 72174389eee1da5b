"""With `--log-format json`, the lines uvicorn writes for a hub are JSON too.

Before the fix any client could make the hub write plain-text lines into its JSON log
(uvicorn's own logging config): a malformed request gave `WARNING:  Invalid HTTP request
received.`, an `Upgrade: websocket` header two more. They now go through jobcore's handler.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import hubproc
import pytest
from hubproc import Hub
from testenv import wait_for


def test_uvicorn_lines_take_the_log_format(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hubproc, "JOBCORE", [*hubproc.JOBCORE, "--log-format", "json"])
    hub = Hub(tmp_path / "jobs.db")
    try:
        for request in (
            b"GET /api/health HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
            b"GET /api/health HTTP/9.9\r\nHost: x\r\n\r\n",
        ):
            with socket.create_connection(("127.0.0.1", hub.port), timeout=10) as sock:
                sock.sendall(request)
                assert sock.recv(65536).startswith(b"HTTP/1.1 ")
        wait_for(lambda: "Invalid HTTP request" in hub.output())
    finally:
        assert hub.terminate() == 0, hub.output()
    lines = [line for line in hub.output().splitlines() if "listening on" not in line]
    records = [json.loads(line) for line in lines]  # every line is JSON
    assert any(record["logger"] == "uvicorn.error" for record in records), lines
