"""Issue 17.15: "until empty" means nothing due and nothing running, children included."""

from __future__ import annotations

from pathlib import Path

from until_empty import run_until_empty_leaves_no_children


def test_run_until_empty_runs_the_children_of_the_last_parent(tmp_path: Path) -> None:
    run_until_empty_leaves_no_children(tmp_path, str(tmp_path / "jobs.db"))
