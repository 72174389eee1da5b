"""Tokens limited to job types and queues: what they may enqueue, act on and claim.

A token's `Limits` hold the job types and the queues it may use; `None` means any
(tokens made before limits existed, and every token made without them). Every route
that enqueues or acts on jobs calls one of the checks here, which answer 403 naming
the type or queue the token may not use:

- a new job (`POST /api/jobs`, `/api/jobs/batch`, `/api/queue`, an agent's children):
  its type and its queue (after defaults) must both be allowed;
- one job (cancel, retry): the job's own type and queue must be allowed;
- a bulk filter: it must name only allowed types and queues, and must name some when
  the token is limited (an empty filter means every job, so it is refused, never
  widened or silently narrowed);
- a claim: an agent token claims only its types and queues (what the agent asks for
  is narrowed to them; 403 when nothing it asks for is allowed).

Read routes are not limited: a limited token reads every job, as any `produce` token.

These rules live in the core because a token's limits are part of the hub's state that
every backend stores (`jobcore.storage.hub_state.TokenRecord`); the hub
(`jobcore_http.grants`) applies them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from jobcore.errors import InvalidPayload

MAX_NAMES = 1000
_NAME = re.compile(r"[^\s,\x00-\x1f\x7f]{1,200}")


@dataclass(frozen=True, slots=True)
class Limits:
    """Job types and queues a token may use; `None` is any, `()` is none."""

    types: tuple[str, ...] | None = None
    queues: tuple[str, ...] | None = None

    @property
    def limited(self) -> bool:
        return self.types is not None or self.queues is not None

    def describe(self) -> str:
        """`types a, b; queues q` (or `any job`), for lists and the dashboard."""
        parts = [
            f"{what} {', '.join(names) or '(none)'}"
            for what, names in (("types", self.types), ("queues", self.queues))
            if names is not None
        ]
        return "; ".join(parts) or "any job"

    def refusal(self, token: str, verb: str, type: str, queue: str) -> str | None:
        """Why `token` may not `verb` a job of `type` in `queue`, or None if it may."""
        if self.types is not None and type not in self.types:
            return (
                f"token {token!r} may not {verb} jobs of type {type!r}; "
                f"it may use types {_names(self.types)}"
            )
        if self.queues is not None and queue not in self.queues:
            return (
                f"token {token!r} may not {verb} jobs in queue {queue!r}; "
                f"it may use queues {_names(self.queues)}"
            )
        return None

    def filter_refusal(self, token: str, types: Sequence[str], queues: Sequence[str]) -> str | None:
        """Why a bulk filter naming `types` and `queues` (empty: any) is beyond `token`."""
        for what, named, allowed in (("type", types, self.types), ("queue", queues, self.queues)):
            if allowed is None:
                continue
            if not named:
                return (
                    f"token {token!r} may act only on jobs of {what}s {_names(allowed)}: "
                    f"name them in the filter's `{what}`"
                )
            outside = [name for name in named if name not in allowed]
            if outside:
                return (
                    f"token {token!r} may not act on jobs of {what} {outside[0]!r}; "
                    f"it may use {what}s {_names(allowed)}"
                )
        return None

    def claimable(
        self, token: str, types: Sequence[str], queues: Sequence[str]
    ) -> tuple[tuple[str, ...], tuple[str, ...]] | str:
        """The types and queues a claim asking for `types`/`queues` (empty: any) may take,
        or why it may take none."""
        out: list[tuple[str, ...]] = []
        for what, asked, allowed in (("type", types, self.types), ("queue", queues, self.queues)):
            if allowed is None:
                out.append(tuple(asked))
                continue
            narrowed = tuple(name for name in asked if name in allowed) if asked else allowed
            if not narrowed:
                return (
                    f"token {token!r} may claim only jobs of {what}s {_names(allowed)}, "
                    f"none of {', '.join(map(repr, asked))}"
                )
            out.append(narrowed)
        return out[0], out[1]

    def stored(self) -> tuple[str | None, str | None]:
        """The two columns as stored (JSON arrays, or NULL for any)."""
        return _dump(self.types), _dump(self.queues)

    @classmethod
    def from_stored(cls, types: Any, queues: Any) -> Limits:
        """From the stored columns (JSON text or decoded lists); anything but a list of
        names reads as "none": a damaged row never widens what a token may do."""
        return cls(_load(types), _load(queues))


UNLIMITED = Limits()


def _names(names: Iterable[str]) -> str:
    return ", ".join(names) or "(none)"


def _dump(names: tuple[str, ...] | None) -> str | None:
    return None if names is None else json.dumps(list(names))


def _load(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str | bytes):
        try:
            value = json.loads(value)
        except ValueError:
            return ()
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        return ()
    return tuple(value)


def parse_names(value: str | Sequence[str] | None, what: str) -> tuple[str, ...] | None:
    """A token's list of job types or queues: comma-separated text or a list of names.

    None stays None (any). Each name is 1-200 characters without spaces, commas or
    control characters; an empty list or name is refused (leave the option out for any).
    """
    if value is None:
        return None
    parts = value.split(",") if isinstance(value, str) else list(value)
    names: list[str] = []
    for part in parts:
        name = part.strip() if isinstance(part, str) else part
        if not isinstance(name, str) or not name:
            raise InvalidPayload(
                f"{what}: an empty name; give names separated by commas (leave {what} out for any)"
            )
        if not _NAME.fullmatch(name) or not name.isprintable() or not _is_utf8(name):
            raise InvalidPayload(
                f"{what}: {name[:60]!r} is not a name (1-200 characters, no spaces, "
                "commas or control characters)"
            )
        if name not in names:
            names.append(name)
    if not names:
        raise InvalidPayload(f"{what}: give at least one name (leave {what} out for any)")
    if len(names) > MAX_NAMES:
        raise InvalidPayload(f"{what}: at most {MAX_NAMES} names")
    return tuple(names)


def _is_utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
