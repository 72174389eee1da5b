"""Shared fixtures: the test plugin is importable here and in worker subprocesses."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HELPERS = Path(__file__).parent / "helpers"
sys.path.insert(0, str(HELPERS))


@pytest.fixture(autouse=True)
def _no_event_loop_left_running(request: pytest.FixtureRequest) -> Iterator[None]:
    """Name the test that left an event loop marked running in the main thread (a later
    test's asyncio.run() fails with no clue where it came from)."""
    yield
    if "browser" not in request.fixturenames and asyncio._get_running_loop() is not None:
        pytest.fail("this test left an event loop marked running in the main thread")
