"""When a schedule fires: its scheduled times as ms UTC, in order, DST rules included.

`every D` fires at the multiples of D since the Unix epoch (UTC), so every
process agrees on the grid: `every = "5m"` fires at :00, :05, … UTC.

A cron expression is read on the wall clock of its time zone, and a DST change
follows cronie's rule:

* a schedule with a fixed hour (`30 2 * * *`) runs once per matching local
  time: a local time the spring-forward gap skips runs at the first instant
  after the gap (03:00 local); a local time the fall-back repeats runs once, at
  its first occurrence;
* a schedule whose hour field is `*` or `*/N` (hourly or more often) follows
  elapsed time: skipped local times do not run, repeated ones run on both passes.

Several local times landing on one instant run once.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Protocol
from zoneinfo import ZoneInfo

from croniter import croniter

SLACK = timedelta(hours=3)  # more than any real DST shift: how far ahead candidates may land
_SLACK_MS = int(SLACK.total_seconds() * 1000)

ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


class Timing(Protocol):
    def times_after(self, after_ms: int) -> Iterator[int]:
        """Scheduled times strictly after `after_ms`, ascending, without end."""
        ...

    def describe(self) -> str: ...


class Every:
    """Multiples of `interval_ms` since the epoch."""

    def __init__(self, interval_ms: int) -> None:
        self.interval_ms = interval_ms

    def times_after(self, after_ms: int) -> Iterator[int]:
        step = self.interval_ms
        at = (after_ms // step + 1) * step
        while True:
            yield at
            at += step

    def describe(self) -> str:
        return f"every {_duration(self.interval_ms)}"


class Cron:
    """A five-field cron expression (or an @alias) on the wall clock of `tz`."""

    def __init__(self, expression: str, tz: ZoneInfo) -> None:
        self.expression = expression
        self.fields = ALIASES.get(expression.strip().lower(), expression).split()
        self.tz = tz
        self.elapsed = self.fields[1].startswith("*")  # hourly or more often

    def times_after(self, after_ms: int) -> Iterator[int]:
        # a local time before `after`'s may land after it only across an offset change
        slack = SLACK if self._slack_ms(after_ms) else timedelta(seconds=1)
        start = _utc(after_ms).astimezone(self.tz).replace(tzinfo=None) - slack
        local_times = croniter(" ".join(self.fields), start)
        pending: list[int] = []
        last = after_ms
        while True:
            naive: datetime = local_times.get_next(datetime)
            for at in self._instants(naive):
                if at > last:
                    heapq.heappush(pending, at)
            # no later local time maps before this bound, so what lies below it is final
            earliest = self._earliest(naive)
            bound = earliest - self._slack_ms(earliest)
            while pending and pending[0] <= bound:
                at = heapq.heappop(pending)
                if at > last:
                    last = at
                    yield at

    def _slack_ms(self, at: int) -> int:
        """How far a later local time may land before `at`: SLACK near a change of UTC
        offset, else 0 (a minutely schedule then walks a few local times, not 360)."""
        offsets = {_utc(at + d).astimezone(self.tz).utcoffset() for d in (-_SLACK_MS, 0, _SLACK_MS)}
        return _SLACK_MS if len(offsets) > 1 else 0

    def _instants(self, naive: datetime) -> list[int]:
        first = naive.replace(tzinfo=self.tz, fold=0)
        second = naive.replace(tzinfo=self.tz, fold=1)
        a, b = _ms(first), _ms(second)
        if a == b:
            return [a]
        if a < b:  # repeated by the fall-back: fold 0 is the first pass
            return [a, b] if self.elapsed else [a]
        # skipped by the spring-forward gap (fold 1 reads it with the later offset: before it)
        return [] if self.elapsed else [self._gap_end(b, a)]

    def _earliest(self, naive: datetime) -> int:
        return min(
            _ms(naive.replace(tzinfo=self.tz, fold=0)), _ms(naive.replace(tzinfo=self.tz, fold=1))
        )

    def _gap_end(self, low: int, high: int) -> int:
        """The first instant in (low, high] whose UTC offset differs from low's: the
        instant the clocks jumped."""
        offset = _utc(low).astimezone(self.tz).utcoffset()
        while high - low > 1000:
            middle = (low + high) // 2 // 1000 * 1000
            if middle <= low:
                break
            if _utc(middle).astimezone(self.tz).utcoffset() == offset:
                low = middle
            else:
                high = middle
        return high

    def describe(self) -> str:
        return f"cron {self.expression!r} {self.tz.key}"


def _utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _duration(ms: int) -> str:
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"
