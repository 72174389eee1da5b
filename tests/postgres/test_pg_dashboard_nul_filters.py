"""A dashboard bulk form whose filter holds a NUL is a 400 on PostgreSQL, not a 503.

Before the fix `/ui/bulk` with `queue=a%00b` in its form body reached the store:
503 "PostgreSQL text fields cannot contain NUL" (the SQLite side is
tests/http/test_dashboard_nul_filters.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("jobcore_http", reason="the hub plugin (jobcore_http) is not here")
sys.path.insert(0, str(Path(__file__).parents[1] / "http"))

from hubproc import Hub, dashboard_bulk_with_nul, make_tokens


def test_nul_in_a_bulk_form_filter_is_400_on_postgresql(pg_url: str, tmp_path: Path) -> None:
    hub = Hub(pg_url, log=tmp_path / "hub.log")
    try:
        tokens = make_tokens(hub, pg_url)  # type: ignore[arg-type]
        dashboard_bulk_with_nul(hub, tokens.admin)
    finally:
        assert hub.terminate() == 0, hub.output()[-3000:]
