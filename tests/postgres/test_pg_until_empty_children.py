"""Issue 17.15 on PostgreSQL: `run --until-empty` exited with the last parent's children
still pending (committed with its completion after the claim that found nothing)."""

from __future__ import annotations

from pathlib import Path

from until_empty import run_until_empty_leaves_no_children


def test_run_until_empty_runs_the_children_of_the_last_parent(tmp_path: Path, pg_url: str) -> None:
    run_until_empty_leaves_no_children(tmp_path, pg_url)
