"""A dashboard bulk form whose filter holds a NUL is a 400 naming it, nothing changed.

Form bodies are not checked with the URL: before the fix `/ui/bulk` with `queue=a%00b`
in its body was a 503 on PostgreSQL (tests/postgres/test_pg_dashboard_nul_filters.py)
and acted on nothing on SQLite; one rule now refuses NUL in filters on both stores.
"""

from __future__ import annotations

from hubproc import Hub, Tokens, dashboard_bulk_with_nul


def test_nul_in_a_bulk_form_filter_is_400(hub: Hub, tokens: Tokens) -> None:
    dashboard_bulk_with_nul(hub, tokens.admin)
