"""Collects the documentation's examples for pytest (Sybil; see docsgen/examples.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = str(Path(__file__).parent)

try:
    from docsgen.examples import sybil
except ModuleNotFoundError as missing:  # only the doc pages need it: tests/ still runs
    if missing.name != "sybil":
        raise

    class NeedsSybil(pytest.File):
        def collect(self) -> Any:
            raise pytest.UsageError(
                f"{self.path}: running the documentation's examples needs Sybil, from the "
                "test extra: pip install -e '.[test]'"
            )

    def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.File | None:
        relative = file_path.relative_to(ROOT)
        if relative.suffix == ".md" and (
            relative.name == "README.md" or relative.parts[0] == "docs"
        ):
            return NeedsSybil.from_parent(parent, path=file_path)  # type: ignore[no-any-return]
        return None
else:
    pytest_collect_file = sybil.pytest()

# pytest put this folder first on sys.path to import this file: take it off again, so the
# test suite imports jobcore as installed (tox: the built wheel), not from the checkout
if sys.path and sys.path[0] == ROOT:
    del sys.path[0]
