"""Error signatures: an error message with the parts that vary between occurrences stripped."""

from __future__ import annotations

import re

_RULES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s'\"<>]+", re.I), "<url>"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I), "<id>"),
    (re.compile(r"(?<![\w/])(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b"), "<host>"),
    (re.compile(r"\b(?:[a-z0-9-]+\.)+[a-z]{2,}(?::\d+)?\b|\b[a-z0-9-]+:\d{2,5}\b", re.I), "<host>"),
    (re.compile(r"(?:(?<=\s)|(?<=^)|(?<=['\"(=]))(?:~|\.{1,2})?/[^\s'\"():,]+"), "<path>"),
    (
        re.compile(r"\b0x[0-9a-f]+\b|\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b", re.I),
        "<hex>",
    ),
    (re.compile(r"(?<![<\w.])[-+]?\d+(?:\.\d+)?(?=[a-z%]{0,3}\b|[^\w]|$)", re.I), "<n>"),
]


def signature(error: str | None) -> str:
    """`ConnectionError: timeout to db-3.internal:5432 after 30s` -> `ConnectionError: timeout to <host> after <n>s`."""
    text = " ".join((error or "").split())
    for pattern, replacement in _RULES:
        text = pattern.sub(replacement, text)
    return text[:300] or "(no error message)"
