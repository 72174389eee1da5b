"""Fixtures for plugin tests: the Anthropic stub and a locally installed Claude Code CLI."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from anthropic_stub import StubServer

CLAUDE_CODE_VERSION = "2.1"


@pytest.fixture
def anthropic_stub() -> Iterator[StubServer]:
    server = StubServer().start()
    yield server
    server.stop()


def _cache_dir() -> Path:
    base = os.environ.get("JOBCORE_TEST_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "jobcore-tests"
    )
    return Path(base)


@pytest.fixture(scope="session")
def claude_bin() -> str:
    """The real Claude Code CLI, installed with npm into a local cache folder once."""
    npm = shutil.which("npm")
    if shutil.which("node") is None or npm is None:
        pytest.skip("Node.js/npm are not installed: the Claude Code CLI backend tests need them")
    prefix = _cache_dir() / f"claude-code-{CLAUDE_CODE_VERSION}"
    binary = prefix / "node_modules" / ".bin" / "claude"
    if not binary.exists():
        prefix.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [
                npm,
                "install",
                "--prefix",
                str(prefix),
                "--no-audit",
                "--no-fund",
                f"@anthropic-ai/claude-code@{CLAUDE_CODE_VERSION}",
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode != 0 or not binary.exists():
            pytest.fail(f"npm could not install @anthropic-ai/claude-code: {done.stderr[-2000:]}")
    return str(binary)
