"""A real `jobcore serve` on 127.0.0.1 and Debian's Chromium driven by Playwright.

Without Chromium (`apt-get install chromium`) or the `playwright` package the
tests skip, saying so; with CI=true a missing browser fails instead. Screenshots
go to tests/browser/output/ (ignored by git); the path is printed.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dashboard_harness import CHROMIUM, CHROMIUM_ARGS, OUTPUT, Hub


def _missing_browser(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"browser tests cannot run under CI: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[Hub]:
    server = Hub(tmp_path)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Chromium for one test module at a time: Playwright's sync API marks an event loop as running
    in the main thread for as long as it is started, and a later test's asyncio.run()
    refuses to start beside it."""
    executable = CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")
    if executable is None:
        _missing_browser(f"Chromium not found at {CHROMIUM} nor on PATH (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing_browser("the playwright package is not installed (pip install playwright)")
    from playwright.sync_api import expect

    expect.set_options(timeout=15_000)  # a loaded CI machine: live updates may take seconds
    with sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh browser context at 1280x800 in a time zone other than UTC."""
    context = browser.new_context(
        viewport={"width": 1280, "height": 800}, timezone_id="Asia/Tokyo", locale="en-GB"
    )
    context.set_default_timeout(15_000)
    opened = context.new_page()
    yield opened
    context.close()


@pytest.fixture(scope="session")
def shots() -> Path:
    OUTPUT.mkdir(exist_ok=True)
    print(f"\nscreenshots: {OUTPUT}")
    return OUTPUT
