"""Fixtures for plugin tests: the Anthropic stub and a locally installed Claude Code CLI."""

from __future__ import annotations

from collections.abc import Iterator

import claude_cli
import pytest
from anthropic_stub import StubServer


@pytest.fixture
def anthropic_stub() -> Iterator[StubServer]:
    server = StubServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def claude_bin() -> str:
    """The real Claude Code CLI from the local cache (tox installs it before the tests)."""
    try:
        return str(claude_cli.ensure())
    except claude_cli.NpmMissing as exc:
        pytest.skip(str(exc))
    except claude_cli.InstallError as exc:
        pytest.fail(str(exc))
