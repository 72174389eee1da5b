"""Helpers of the PostgreSQL tests (importable from test modules, unlike conftest)."""

from __future__ import annotations

import os
from typing import NoReturn
from urllib.parse import urlsplit, urlunsplit

import pytest

SERVER = os.environ.get("JOBCORE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")
"""The server the PostgreSQL tests use (`$JOBCORE_TEST_POSTGRES`)."""


def with_database(url: str, name: str) -> str:
    """`url` pointing at database `name`."""
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


def unavailable(reason: str) -> NoReturn:
    """Skip, saying why; under CI=true fail instead."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"PostgreSQL tests cannot run under CI: {reason}", pytrace=False)
    pytest.skip(f"PostgreSQL tests skipped: {reason}")
