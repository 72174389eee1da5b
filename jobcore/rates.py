"""Global rate limits (DESIGN §16): at most N starts (claims) per sliding period.

A rate limit is a row in the store's `rates` table: at most `rate` jobs claimed in
any window of `period_ms` per queue (`scope` "queue"), per job type ("type"), or per
key of a job type ("key": per `limit_key`, the same key concurrency limits use).
Every claim that takes rate-limited jobs writes what it took to `rate_starts`
(scope, name, key, at, n) in its own transaction; the next claims count the starts
whose `at` is within `period_ms` of their clock. Exact over a sliding window: a
claim takes only what keeps every window of `period_ms` that holds its starts at or
under `rate` (each claim counts all later starts too, so claims decided out of clock
order are still counted against each other).

A window pushed out (`RetryAfter(seconds, limit=True)`) is one start row of weight
`rate` at `until - period_ms`: the limit counts as full until `until`. The row also
carries `held_until` (NULL on a real start), so what is shown counts real starts
only and says the limit is held until then (`RateUse`).

Rate limits come from two places, as concurrency limits do: set at run time
(`jobcore limit --rate`, the hub), or declared on a job type (`rate="50/1m"`,
per key when the type has a `concurrency_key`) and written by its workers at start.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jobcore.concurrency import LimitScope, LimitSource, checked_scope
from jobcore.errors import InvalidPayload
from jobcore.pauses import checked_name

MAX_RATE = 1_000_000
"""Most starts a rate limit allows per period."""

MAX_PERIOD_MS = 86_400_000
"""Longest period of a rate limit: one day."""

MAX_PUSH_SECONDS = 86_400.0
"""Longest a `RetryAfter(..., limit=True)` pushes a window out (longer values are clamped)."""

_UNITS = {"ms": 0.001, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d+(?:\.\d+)?)?\s*(ms|sec|s|min|m|h|d)\s*$")

OPENS_GRACE_MS = 1000
"""How long after a full rate limit's window opened a waiter still takes it as due (its
own clock may wake it a moment early or late); the next limited claim reads it anew."""

RatePair = tuple[str, str]
"""(scope, name) of a rate limit."""

StartKey = tuple[str, str, str]
"""(scope, name, key) of counted starts; key "" for queue and type limits."""


@dataclass(frozen=True, slots=True)
class Rate:
    """One rate limit: at most `rate` claims per `period_ms` per `scope` `name`."""

    scope: LimitScope
    name: str
    rate: int
    period_ms: int
    source: LimitSource

    def to_json(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "name": self.name,
            "rate": self.rate,
            "period": self.period_ms / 1000,
            "source": self.source,
        }

    def text(self) -> str:
        return f"{self.rate}/{format_period(self.period_ms)}"


def format_period(period_ms: int) -> str:
    for unit, ms in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if period_ms % ms == 0:
            count = period_ms // ms
            return f"{count}{unit}"
    return f"{period_ms}ms"


def checked_rate(value: Any, where: str = "rate") -> int:
    """How many starts per period: a whole number from 1 to MAX_RATE."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        else:
            raise InvalidPayload(f"{where} must be a whole number from 1, not {value!r}")
    if not 1 <= value <= MAX_RATE:
        raise InvalidPayload(f"{where} must be from 1 to {MAX_RATE}, not {value}")
    return int(value)


def checked_period(seconds: Any, where: str = "period") -> int:
    """A period in seconds (> 0, at most a day, finite) as whole milliseconds (at least 1),
    rounded up: a stored period is never shorter than the one asked for (`1/2.5ms` is at
    most 1 in 3 ms, not 1 in 2 ms: more starts than asked)."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise InvalidPayload(f"{where} must be a number of seconds, not {seconds!r}")
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_PERIOD_MS / 1000):
        raise InvalidPayload(
            f"{where} must be more than 0 and at most 86400 seconds (a day), not {seconds!r}"
        )
    return max(1, math.ceil(round(seconds * 1000, 6)))  # 0.3 s: 300 ms, not 301


def parse_rate(text: Any, where: str = "rate") -> tuple[int, int]:
    """`"50/1m"`, `"10/s"`, `"100/30s"`, `"5/500ms"`, `"1000/h"`, `"1/d"` as (rate, period_ms);
    a `(rate, seconds)` pair is taken too. InvalidPayload naming the forms otherwise."""
    if isinstance(text, tuple) and len(text) == 2:
        return checked_rate(text[0], where), checked_period(text[1], f"{where} period")
    match = _RATE.match(text) if isinstance(text, str) else None
    if match is None:
        raise InvalidPayload(
            f"{where} must be N/PERIOD such as 50/1m, 10/s, 100/30s, 5/500ms (units ms, s, m, "
            f"h, d), not {text!r}"
        )
    count, amount, unit = match.groups()
    if len(count) > 9:
        raise InvalidPayload(f"{where} must be from 1 to {MAX_RATE}, not {count}")
    seconds = float(amount or 1) * _UNITS[unit]
    return checked_rate(int(count), where), checked_period(seconds, f"{where} period")


def checked_rate_limit(
    scope: str, name: str, rate: Any, period_seconds: Any, source: str = "set"
) -> Rate:
    """A `Rate` from outside values, or InvalidPayload naming what is wrong."""
    scope_ = checked_scope(scope)
    name = checked_name("type" if scope_ == "key" else scope_, name)
    return Rate(
        scope_,
        name,
        checked_rate(rate),
        checked_period(period_seconds),
        "declared" if source == "declared" else "set",
    )


def declared_rates(types: Iterable[Any]) -> tuple[list[Rate], list[str]]:
    """(the rate limits these job types declare, the names of those that declare none).
    A type with a `concurrency_key` declares its rate per key."""
    made: list[Rate] = []
    unrated: list[str] = []
    for job_type in types:
        rate = getattr(job_type, "rate", None)
        if rate is None:
            unrated.append(job_type.name)
            continue
        count, period_ms = parse_rate(rate, f"job type {job_type.name!r}: rate")
        scope = "key" if getattr(job_type, "concurrency_key", None) is not None else "type"
        made.append(Rate(checked_scope(scope), job_type.name, count, period_ms, "declared"))
    return made, unrated


def declaring_rates_changes(
    stored: Sequence[Rate], declared: Sequence[Rate], unrated: Sequence[str]
) -> bool:
    """Whether `Storage.declare_rates(declared, unrated)` would change `stored`."""
    rows = {(r.scope, r.name): r for r in stored}
    for rate in declared:
        row = rows.get((rate.scope, rate.name))
        if row is None or (
            row.source == "declared" and (row.rate, row.period_ms) != (rate.rate, rate.period_ms)
        ):
            return True
    kept = {(r.scope, r.name) for r in declared}
    undeclared = {r.name for r in declared} | set(unrated)
    return any(
        row.source == "declared"
        and row.scope in ("type", "key")
        and row.name in undeclared
        and (row.scope, row.name) not in kept
        for row in stored
    )


@dataclass
class ClaimLimits:
    """What a claim must respect besides pauses: concurrency caps and rate limits (both
    empty for almost every store: the plain claim runs then)."""

    caps: dict[tuple[str, str], int] = field(default_factory=dict)
    rates: dict[RatePair, tuple[int, int]] = field(default_factory=dict)  # (rate, period_ms)

    def __bool__(self) -> bool:
        return bool(self.caps or self.rates)


class Window:
    """The starts of every rate limit within its window at `now`, as one claim reads them:
    per (scope, name, key), how many and the oldest one's time."""

    def __init__(
        self,
        rates: Mapping[RatePair, tuple[int, int]],
        rows: Iterable[tuple[str, str, str, int, int]],
        now: int,
    ) -> None:
        self.rates, self.now = rates, now
        self.starts: dict[StartKey, tuple[int, int]] = {}  # (used, oldest at)
        for scope, name, key, used, oldest in rows:
            if (scope, name) in rates:
                self.starts[(scope, name, key)] = (int(used), int(oldest))

    def used(self, start: StartKey) -> int:
        found = self.starts.get(start)
        return 0 if found is None else found[0]

    def keys_used(self, type_name: str) -> dict[str, int]:
        return {s[2]: used for s, (used, _) in self.starts.items() if s[:2] == ("key", type_name)}

    def opens(self, taken: Mapping[StartKey, int]) -> int | None:
        """When a limit full now (counting `taken`) may have room again (store clock, ms):
        when its oldest start leaves the window; None when none is full. Never late; early
        only when the oldest start does not free enough (a pushed window), and then the
        claim made at that time tells the next."""
        soonest: int | None = None
        for start in {*self.starts, *taken}:
            rate, period_ms = self.rates[start[:2]]
            used, oldest = self.starts.get(start, (0, self.now))
            if used + taken.get(start, 0) < rate:
                continue
            opens = oldest + period_ms
            soonest = opens if soonest is None else min(soonest, opens)
        return soonest


def starts_of(
    rates: Mapping[RatePair, tuple[int, int]], chosen: Iterable[tuple[Any, ...]]
) -> dict[StartKey, int]:
    """The starts that claiming these candidates (id, priority, run_at, queue, type, key)
    counts against each rate limit they fall under."""
    starts: dict[StartKey, int] = {}
    for candidate in chosen:
        queue, type_, key = candidate[3], candidate[4], candidate[5]
        for start in (("queue", queue, ""), ("type", type_, ""), ("key", type_, key)):
            if start[:2] in rates and (start[0] != "key" or key is not None):
                starts[start] = starts.get(start, 0) + 1
    return starts


def push_target(
    rates: Mapping[RatePair, tuple[int, int]], queue: str, type_name: str, key: str | None
) -> StartKey | None:
    """The narrowest rate limit a job falls under (its key's, else its type's, else its
    queue's): the one `RetryAfter(..., limit=True)` pushes out; None without one."""
    if key is not None and ("key", type_name) in rates:
        return ("key", type_name, key)
    if ("type", type_name) in rates:
        return ("type", type_name, "")
    if ("queue", queue) in rates:
        return ("queue", queue, "")
    return None


def push_seconds(seconds: Any) -> float:
    """A push from a handler, clamped: NaN, negative or non-numbers push nothing (0),
    infinite or huge ones at most MAX_PUSH_SECONDS."""
    try:
        value = float(seconds)
    except (TypeError, ValueError):
        return 0.0
    if math.isnan(value) or value <= 0:
        return 0.0
    return min(value, MAX_PUSH_SECONDS)


@dataclass(frozen=True, slots=True)
class RateUse:
    """What a rate limit holds now: `used`, the real starts in its current window (for a
    key limit, its keys at the rate), pushes not counted; `held_until`, when the latest
    push (`RetryAfter(..., limit=True)`, of any key for a key limit) stops holding it
    full (store clock, ms), None when none does."""

    used: int = 0
    held_until: int | None = None


def rate_use(
    rates: Mapping[RatePair, tuple[int, int]],
    rows: Iterable[tuple[str, str, str, int, int | None]],
    now: int,
) -> dict[RatePair, RateUse]:
    """Each rate limit's `RateUse` from its window's rows (scope, name, key, real starts,
    latest `held_until` or None)."""
    started: dict[StartKey, int] = {}
    held: dict[RatePair, int] = {}
    for scope, name, key, used, until in rows:
        if (scope, name) not in rates:
            continue
        started[(scope, name, key)] = int(used)
        if until is not None and int(until) > now:
            held[(scope, name)] = max(held.get((scope, name), 0), int(until))
    use: dict[RatePair, RateUse] = {}
    for (scope, name), (rate, _) in rates.items():
        if scope == "key":
            keys = [n for (s, m, _), n in started.items() if (s, m) == (scope, name)]
            used = sum(1 for n in keys if n >= rate)
        else:
            used = started.get((scope, name, ""), 0)
        use[(scope, name)] = RateUse(used, held.get((scope, name)))
    return use
