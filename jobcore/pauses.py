"""Paused queues and job types (DESIGN §16): what a pause is, and checks on its names.

A pause is a row in the store; every claim reads the pauses inside its own
statement or transaction, so a pause holds for every claim that starts after
it commits, on every worker, agent and hub alike. Running jobs finish;
enqueue still works; resuming makes the held work claimable again.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from jobcore.errors import InvalidPayload
from jobcore.timeutil import iso

PauseKind = Literal["queue", "type"]
KINDS: tuple[PauseKind, ...] = ("queue", "type")

MAX_NAME = 200
"""Longest queue or type name a pause accepts (characters)."""

MAX_REASON = 500
"""Longest reason a pause keeps (characters)."""


@dataclass(frozen=True, slots=True)
class Pause:
    """One paused queue or type: why, since when (ms UTC, the store's clock), by whom."""

    kind: PauseKind
    name: str
    reason: str
    since: int
    by: str

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "reason": self.reason,
            "since": iso(self.since),
            "by": self.by,
        }


def _printable(text: str) -> bool:
    return all(unicodedata.category(ch)[0] != "C" for ch in text)


def checked_kind(kind: str) -> PauseKind:
    for known in KINDS:
        if kind == known:
            return known
    raise InvalidPayload(f"pause kind must be 'queue' or 'type', not {kind!r}")


def checked_name(kind: str, name: str) -> str:
    """The queue or type name, or InvalidPayload naming what is wrong with it."""
    if not isinstance(name, str) or not name.strip():
        raise InvalidPayload(f"give the {kind} to pause or resume: its name is empty")
    if len(name) > MAX_NAME:
        raise InvalidPayload(f"{kind} name is {len(name)} characters; at most {MAX_NAME}")
    if not _printable(name):
        raise InvalidPayload(f"{kind} name {name!r} has control characters; use printable text")
    return name


def checked_text(what: str, text: str, limit: int) -> str:
    """A reason or an operator's name: printable (newlines become spaces), clamped to `limit`."""
    if not isinstance(text, str):
        raise InvalidPayload(f"{what} must be text")
    text = " ".join(text.split())
    if not _printable(text):
        raise InvalidPayload(f"{what} has control characters; use printable text")
    try:
        text.encode()
    except UnicodeEncodeError:
        raise InvalidPayload(f"{what} is not valid Unicode (a lone surrogate)") from None
    return text[:limit]


Narrowed = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]


def narrow_for_pauses(
    queues: Sequence[str],
    types: Sequence[str],
    paused_queues: Sequence[str],
    paused_types: Sequence[str],
) -> Narrowed | None:
    """A claimer's filters with the paused names taken out: (queues, types, queues to
    skip, types to skip), or None when every queue or every type it takes is paused.

    A name dropped from a filter needs no skip clause; without a filter on that
    column, the paused names are skipped row by row.
    """
    skip_queues, skip_types = tuple(paused_queues), tuple(paused_types)
    if queues and skip_queues:
        queues = tuple(q for q in queues if q not in skip_queues)
        if not queues:
            return None
        skip_queues = ()
    if types and skip_types:
        types = tuple(t for t in types if t not in skip_types)
        if not types:
            return None
        skip_types = ()
    return tuple(queues), tuple(types), skip_queues, skip_types
