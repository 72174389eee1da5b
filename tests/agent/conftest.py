"""Fixtures for agent tests: a file server on 127.0.0.1 that counts requests, solver scripts."""

from __future__ import annotations

import hashlib
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from hubenv import RATES, Hub
from testenv import LocalHTTPServer


class FileServer:
    """Serves `files[path]` (bytes) with optional per-path delay or status; counts GETs by path."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.status: dict[str, int] = {}
        self.delay: dict[str, float] = {}
        self.hits: Counter[str] = Counter()
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with owner._lock:
                    owner.hits[self.path] += 1
                status = owner.status.get(self.path)
                body = owner.files.get(self.path)
                if status is not None or body is None:
                    self.send_response(status or 404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                half = len(body) // 2
                self.wfile.write(body[:half])
                self.wfile.flush()
                time.sleep(owner.delay.get(self.path, 0.0))
                self.wfile.write(body[half:])

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = LocalHTTPServer(Handler)
        self.url = self._server.url

    def add(self, path: str, body: bytes) -> str:
        """Serve `body` at `path`; returns its URL."""
        self.files[path] = body
        return self.url + path

    def close(self) -> None:
        self._server.close()


@pytest.fixture
def file_server() -> Iterator[FileServer]:
    server = FileServer()
    yield server
    server.close()


def solver_source(body: str) -> bytes:
    """A Python script run as `EXE --params JSON [args…]`; `params` and `args` are in scope."""
    return (
        f"#!{sys.executable}\n"
        "import json, os, sys, time\n"
        "params = json.loads(sys.argv[2]); args = sys.argv[3:]\n" + body + "\n"
    ).encode()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


MakeSolver = Callable[[str], tuple[bytes, str]]


@pytest.fixture
def make_solver() -> MakeSolver:
    """`make_solver(body)` -> (script bytes, sha256)."""

    def factory(body: str) -> tuple[bytes, str]:
        data = solver_source(body)
        return data, sha256(data)

    return factory


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache"


@pytest.fixture
def rates_hub(tmp_path: Path) -> Iterator[Hub]:
    """A hub (lease 20 s) whose processes have the rate-limit tests' job types
    (tests/helpers/jobcore_rates_plugin.py); give its agents `env_extra=RATES`."""
    hub = Hub(tmp_path, lease="20s", env_extra=RATES)
    yield hub
    hub.close()
