"""Parser for files of named queries (`-- name: NAME` blocks)."""

from __future__ import annotations

import re
from importlib import resources

_HEADER = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def parse_queries(text: str) -> dict[str, str]:
    """Split `text` into `{name: sql}`; comments before the first header are ignored."""
    parts = _HEADER.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        sql = body.strip().rstrip(";").strip()
        if not sql:
            raise ValueError(f"query {name!r} is empty")
        queries[name] = sql
    return queries


def load_queries(package: str, filename: str) -> dict[str, str]:
    """Load a named-query file shipped inside `package`."""
    return parse_queries(resources.files(package).joinpath(filename).read_text("utf-8"))
