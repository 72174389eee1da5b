"""The claim under concurrency limits (DESIGN §16), the same on every store.

A store gives what it reads and writes (`LimitedReads`) inside one transaction
that no other limited claim runs beside; this picks, in rounds:

1. the queues and types at their limit are skipped as paused ones are, so their
   backlog is not read;
2. key-limited types are read on their own: the head of the type's pending
   jobs, and, when keys at their limit fill that head, each key's own head
   (one index seek per key with pending jobs, never a full key's backlog);
3. the candidates are taken best first while every limit they fall under has
   room, and claimed by id; a round that refused a candidate (a limit filled
   during the round) is followed by another that skips what is now full.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from jobcore.concurrency import Candidate, Room

MAX_ROUNDS = 8
"""At most this many pick-and-claim rounds per claim."""


class LimitedReads(Protocol):
    """A store's reads for one limited claim, all in its transaction."""

    def held(self) -> dict[tuple[str, str], int]:
        """Claimed jobs per ("queue", name) and ("type", name)."""

    def held_keys(self, type_name: str) -> dict[str, int]:
        """Claimed jobs of a key-limited type per key."""

    def paused(self) -> dict[str, set[str]]:
        """Paused names per kind ("queue", "type")."""

    def candidates(
        self, need: int, skip_queues: Sequence[str], skip_types: Sequence[str]
    ) -> list[Candidate]:
        """Up to `need` pending jobs the claimer takes, in claim order, none of
        `skip_queues` or `skip_types` (paused, at their limit, or key-limited)."""

    def type_head(self, type_name: str, window: int, skip_queues: Sequence[str]) -> list[Candidate]:
        """The first `window` pending jobs of a type in claim order, not in `skip_queues`."""

    def pending_keys(self, type_name: str) -> list[str]:
        """The keys of a type that have pending jobs."""

    def key_heads(
        self, type_name: str, rooms: dict[str, int], skip_queues: Sequence[str]
    ) -> list[Candidate]:
        """Up to `rooms[key]` first pending jobs of each key, not in `skip_queues`."""

    def claim_ids(self, ids: list[str], done: int) -> list[Any]:
        """Claim these pending jobs (`done` claimed before in this claim); their rows."""


def claim_limited(
    reads: LimitedReads,
    caps: dict[tuple[str, str], int],
    types: Sequence[str],
    limit: int,
) -> list[Any]:
    """Claim up to `limit` jobs under every limit in `caps`; the claimed rows."""
    held = reads.held() if any(scope != "key" for scope, _ in caps) else {}
    room = Room(caps, held)
    all_keyed = sorted(name for scope, name in caps if scope == "key")
    keyed = [name for name in all_keyed if not types or name in types]
    for name in keyed:
        cap = caps[("key", name)]
        room.keys[name] = {key: cap - n for key, n in reads.held_keys(name).items()}
    paused = reads.paused()
    rows: list[Any] = []
    for _ in range(MAX_ROUNDS):
        need = limit - len(rows)
        if need <= 0:
            break
        skip_queues = sorted({*room.full("queue"), *paused.get("queue", ())})
        skip_types = sorted({*room.full("type"), *all_keyed, *paused.get("type", ())})
        candidates = reads.candidates(need, skip_queues, skip_types)
        for name in keyed:
            if name in paused.get("type", ()) or name in room.full("type"):
                continue
            candidates += _keyed(reads, name, room, skip_queues, need)
        candidates.sort(key=lambda c: (-c[1], c[2], c[0]))
        chosen: list[str] = []
        refused = False
        for candidate in dict.fromkeys(candidates):
            if len(chosen) >= need:
                break
            if room.take(candidate):
                chosen.append(candidate[0])
            else:
                refused = True
        if chosen:
            rows += reads.claim_ids(chosen, len(rows))
        if not refused or not chosen:
            break
    return rows


def _keyed(
    reads: LimitedReads, name: str, room: Room, skip_queues: Sequence[str], need: int
) -> list[Candidate]:
    """Pending jobs of key-limited type `name`, none of a key at its limit."""
    window = 4 * need + 64
    head = reads.type_head(name, window, skip_queues)
    keys = room.keys[name]
    cap = room.caps[("key", name)]
    fits = [c for c in head if c[5] is None or keys.get(c[5], cap) > 0]
    if len(fits) >= need or len(head) < window:
        return fits
    rooms = {}
    for key in reads.pending_keys(name):
        left = keys.get(key, cap)
        if left > 0:
            rooms[key] = min(left, need)
    return [c for c in head if c[5] is None] + reads.key_heads(name, rooms, skip_queues)
