"""Clock, duration parsing and ISO-8601 formatting. Stored times are integer ms UTC."""

from __future__ import annotations

import functools
import re
import time
from datetime import UTC, datetime

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def now_ms() -> int:
    """Wall-clock time in integer milliseconds since the epoch (UTC)."""
    return time.time_ns() // 1_000_000


def parse_duration(text: str | float | int) -> float:
    """Parse `500ms`, `30s`, `5m`, `2h`, `1d` or plain seconds into seconds.

    Raises ValueError with a message saying which forms are accepted.
    """
    if isinstance(text, bool):
        raise ValueError(f"{text!r} is not a duration")
    if isinstance(text, int | float):
        if text < 0:
            raise ValueError(f"{text!r} is negative; durations must be >= 0")
        return float(text)
    match = _DURATION.match(text)
    if not match:
        raise ValueError(
            f"{text!r} is not a duration; use a number of seconds or 500ms, 30s, 5m, 2h, 1d"
        )
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def parse_time(text: str) -> int:
    """Parse an ISO-8601 time (UTC when no offset is given) into ms since the epoch."""
    try:
        parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{text!r} is not an ISO-8601 time; use e.g. 2026-01-31T12:00:00 or "
            "2026-01-31T12:00:00+02:00"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


def iso(ms: int | None) -> str | None:
    """Format ms since the epoch as ISO-8601 UTC with millisecond precision."""
    if ms is None:
        return None
    return _iso(ms)


@functools.lru_cache(maxsize=4096)
def _iso(ms: int) -> str:
    """`iso`, remembered: a job's times repeat across its fields and across the jobs of one
    batch or listing, and formatting one costs more than the rest of its JSON."""
    stamp = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")
