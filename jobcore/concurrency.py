"""Global concurrency limits (DESIGN §16): what a limit is, and checks on its values.

A limit is a row in the store's `limits` table: at most `concurrency` jobs
`claimed` at once per queue (`scope` "queue"), per job type ("type"), or per
key of a job type ("key": per value of the `limit_key` each job of that type
got at enqueue from the type's `concurrency_key`). Every claim counts the
claimed rows inside its own write transaction, so the count is derived from
the jobs and cannot drift: whatever takes a job out of `claimed` (complete,
fail, retry, release, cancel, the lease sweep) frees its slot.

Limits come from two places: set at run time (`jobcore limit`, the hub), or
declared on a job type (`JobType(concurrency=..., concurrency_key=...)`) and
written to the store by each worker that registers the type when it starts
(`declare_types`), so claimers without the type (agents, other workers)
respect it too. A limit set at run time wins over a declared one until it is
cleared.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from jobcore.errors import InvalidPayload
from jobcore.pauses import checked_name
from jobcore.timeutil import iso

LimitScope = Literal["queue", "type", "key"]
SCOPES: tuple[LimitScope, ...] = ("queue", "type", "key")
LimitSource = Literal["set", "declared"]

MAX_CONCURRENCY = 1_000_000
"""Largest concurrency a limit accepts."""

MAX_KEY = 200
"""Longest concurrency key a job keeps (characters); longer keys are refused at enqueue."""

ConcurrencyKey = str | Callable[[Any], Any]
"""A payload field name, or a callable of the validated payload model giving the key."""


@dataclass(frozen=True, slots=True)
class Limit:
    """One concurrency limit: at most `concurrency` claimed jobs per `scope` `name`
    (per key of type `name` for scope "key"); `source` is "set" or "declared"."""

    scope: LimitScope
    name: str
    concurrency: int
    source: LimitSource

    def to_json(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "name": self.name,
            "concurrency": self.concurrency,
            "source": self.source,
        }


def checked_scope(scope: str) -> LimitScope:
    for known in SCOPES:
        if scope == known:
            return known
    raise InvalidPayload(f"limit scope must be 'queue', 'type' or 'key', not {scope!r}")


def checked_concurrency(value: Any, where: str = "concurrency") -> int:
    """A concurrency: an int from 1 to MAX_CONCURRENCY (bools and floats refused)."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        else:
            raise InvalidPayload(f"{where} must be a whole number from 1, not {value!r}")
    if not 1 <= value <= MAX_CONCURRENCY:
        raise InvalidPayload(f"{where} must be from 1 to {MAX_CONCURRENCY}, not {value}")
    return int(value)


def checked_limit(scope: str, name: str, concurrency: Any, source: str = "set") -> Limit:
    """A `Limit` from outside values, or InvalidPayload naming what is wrong."""
    scope_ = checked_scope(scope)
    name = checked_name("type" if scope_ == "key" else scope_, name)
    return Limit(
        scope_,
        name,
        checked_concurrency(concurrency),
        "declared" if source == "declared" else "set",
    )


def check_declaration(type_name: str, concurrency: Any, key: Any, rate: Any = None) -> None:
    """Raise InvalidPayload when a job type's `concurrency`/`concurrency_key`/`rate` are
    unusable."""
    if concurrency is not None:
        checked_concurrency(concurrency, f"job type {type_name!r}: concurrency")
    if rate is not None:
        from jobcore.rates import parse_rate

        parse_rate(rate, f"job type {type_name!r}: rate")
    if key is not None:
        if concurrency is None and rate is None:
            raise InvalidPayload(
                f"job type {type_name!r}: concurrency_key needs concurrency=N "
                "(how many jobs may run at once per key) or rate='N/PERIOD'"
            )
        if not (callable(key) or (isinstance(key, str) and key)):
            raise InvalidPayload(
                f"job type {type_name!r}: concurrency_key must be a payload field name or a "
                f"callable of the payload, not {key!r}"
            )


def key_of(type_name: str, key: ConcurrencyKey, model: Any) -> str | None:
    """The concurrency key of one payload (None: this job has no key, so no key limit).

    A string names a payload field; a callable is called with the payload model.
    The key is the value as text; InvalidPayload when it is too long or not text.
    """
    value = getattr(model, key, None) if isinstance(key, str) else key(model)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InvalidPayload(
            f"concurrency key of {type_name!r} must be text or a whole number, "
            f"not {type(value).__name__}"
        )
    text = str(value)
    if len(text) > MAX_KEY:
        raise InvalidPayload(
            f"concurrency key of {type_name!r} is {len(text)} characters; at most {MAX_KEY}"
        )
    return text


def declaring_changes(
    stored: Sequence[Limit], declared: Sequence[Limit], unlimited: Sequence[str]
) -> bool:
    """Whether `Storage.declare_limits(declared, unlimited)` would change `stored` (the
    store's limits now): a worker then writes them, else takes no write lock at start."""
    rows = {(limit.scope, limit.name): limit for limit in stored}
    for limit in declared:
        row = rows.get((limit.scope, limit.name))
        if row is None or (row.source == "declared" and row.concurrency != limit.concurrency):
            return True
    kept = {(limit.scope, limit.name) for limit in declared}
    undeclared = {limit.name for limit in declared} | set(unlimited)
    return any(
        row.source == "declared"
        and row.scope in ("type", "key")
        and row.name in undeclared
        and (row.scope, row.name) not in kept
        for row in stored
    )


def declared_limits(types: Iterable[Any]) -> tuple[list[Limit], list[str]]:
    """(the limits these job types declare, the names of those that declare none)."""
    made: list[Limit] = []
    unlimited: list[str] = []
    for job_type in types:
        concurrency = getattr(job_type, "concurrency", None)
        if concurrency is None:
            unlimited.append(job_type.name)
            continue
        scope = "key" if getattr(job_type, "concurrency_key", None) is not None else "type"
        made.append(checked_limit(scope, job_type.name, concurrency, "declared"))
    return made, unlimited


Candidate = tuple[str, int, int, str, str, str | None]
"""A pending job a limited claim may take: id, priority, run_at, queue, type, limit_key."""


class Room:
    """What each limited queue, type and key may still take in this claim: the least of
    its concurrency room (cap - claimed) and its rate room (rate - started in the window)."""

    def __init__(
        self,
        caps: dict[tuple[str, str], int],
        held: dict[tuple[str, str], int],
        rates: dict[tuple[str, str], tuple[int, int]] | None = None,
        used: Callable[[tuple[str, str, str]], int] | None = None,
    ) -> None:
        self.caps = caps
        self.rates = rates or {}
        self.left = {pair: cap - held.get(pair, 0) for pair, cap in caps.items()}
        self.key_cap = {name: cap for (scope, name), cap in caps.items() if scope == "key"}
        for (scope, name), (rate, _) in self.rates.items():
            if scope == "key":
                self.key_cap[name] = min(self.key_cap.get(name, rate), rate)
                continue
            left = rate - (used((scope, name, "")) if used else 0)
            self.left[(scope, name)] = min(self.left.get((scope, name), left), left)
        self.keys: dict[str, dict[str, int]] = {}  # keyed type -> key -> room left

    def open_keys(self, name: str, held: dict[str, int], used: dict[str, int]) -> None:
        """The room of each key of keyed type `name` that holds claims or recent starts."""
        cap = self.caps.get(("key", name))
        rate = self.rates.get(("key", name))
        keys: dict[str, int] = {}
        for key in {*held, *used}:
            lefts = [] if cap is None else [cap - held.get(key, 0)]
            lefts += [] if rate is None else [rate[0] - used.get(key, 0)]
            keys[key] = min(lefts)
        self.keys[name] = keys

    def full(self, scope: str) -> list[str]:
        return [name for (s, name), left in self.left.items() if s == scope and left <= 0]

    def take(self, candidate: Candidate) -> bool:
        """Take one slot of each limit `candidate` falls under; False (nothing taken) if full."""
        _, _, _, queue, type_, key = candidate
        pairs = [pair for pair in (("queue", queue), ("type", type_)) if pair in self.left]
        if any(self.left[pair] <= 0 for pair in pairs):
            return False
        keys = self.keys.get(type_)
        if keys is not None and key is not None:
            left = keys.get(key, self.key_cap[type_])
            if left <= 0:
                return False
            keys[key] = left - 1
        for pair in pairs:
            self.left[pair] -= 1
        return True


def limit_rows(storage: Any) -> list[dict[str, Any]]:
    """Each limit of `storage` as JSON, with `held`: the jobs it holds claimed now (for a
    key limit: how many of its keys are at the limit); then each rate limit, with `used`:
    its starts in the current window (for a key limit: its keys at the limit), and
    `held_until`: until when a `RetryAfter(..., limit=True)` holds it full (ISO-8601 UTC,
    None when nothing does; a push is not a start). Every row has every field (None where
    it does not apply)."""
    held = storage.held()
    rows = [
        {**limit.to_json(), "held": held.get((limit.scope, limit.name), 0)}
        | {"rate": None, "period": None, "used": None, "held_until": None}
        for limit in storage.limits()
    ]
    rates = storage.rates()
    use = storage.rate_use() if rates else {}
    for rate in rates:
        now = use.get((rate.scope, rate.name))
        rows.append(
            {"concurrency": None, "held": None, **rate.to_json()}
            | {"used": now.used if now else 0, "held_until": iso(now.held_until if now else None)}
        )
    return rows
