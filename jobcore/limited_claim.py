"""The claim under concurrency limits (DESIGN §16), the same on every store.

A store gives what it reads and writes (`LimitedReads`) inside one transaction
that no other limited claim runs beside; this picks, in rounds:

1. the queues and types at their limit are skipped as paused ones are, so their
   backlog is not read;
2. key-limited types are read on their own: the head of the type's pending
   jobs in claim order, and, when keys at their limit fill that head, the heads
   of the next keys with room, taking turns from where the last such claim
   stopped (one index seek per key; keys at their limit are at most the claimed
   jobs, so this never reads a full key's backlog nor every key);
3. the candidates are taken best first while every limit they fall under has
   room, and claimed by id; a round that refused a candidate (a limit filled
   during the round) is followed by another that skips what is now full.
   Where nothing could be refused (no rate or key limit) a store may read and
   claim in one statement instead (`claim_fitting`).

Rate limits (`jobcore.rates`) are room as concurrency limits are: the starts in
each window are read once (`rate_starts`), the claim's starts written back
(`record_starts`) with the earliest time a full rate limit opens again, which
idle claimers wait for instead of polling.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from jobcore.concurrency import Candidate, Room
from jobcore.rates import ClaimLimits, StartKey, Window, starts_of

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
        self,
        need: int,
        skip_queues: Sequence[str],
        skip_types: Sequence[str],
        rooms: dict[tuple[str, str], int] | None = None,
    ) -> list[Candidate]:
        """Up to `need` pending jobs the claimer takes, in claim order, none of
        `skip_queues` or `skip_types` (paused, at their limit, or key-limited). `rooms`:
        what each limited queue and type may still take; a store may read no more of
        one than that (the rest would be refused)."""

    def type_head(self, type_name: str, window: int, skip_queues: Sequence[str]) -> list[Candidate]:
        """The first `window` pending jobs of a type in claim order, not in `skip_queues`."""

    cursors: dict[str, str]
    """Per key-limited type, the last key a claim past full keys served (kept by the
    store between claims: where the next such claim starts, so keys take turns)."""

    def next_key(self, type_name: str, after: str | None) -> str | None:
        """The first key of a type with pending jobs after `after` (None: the first)."""

    def key_heads(
        self, type_name: str, rooms: dict[str, int], skip_queues: Sequence[str]
    ) -> list[Candidate]:
        """Up to `rooms[key]` first pending jobs of each key, not in `skip_queues`."""

    def claim_ids(self, ids: list[str], done: int) -> list[Any]:
        """Claim these pending jobs (`done` claimed before in this claim); their rows."""

    def claim_fitting(
        self,
        need: int,
        skip_queues: Sequence[str],
        skip_types: Sequence[str],
        rooms: dict[tuple[str, str], int],
    ) -> list[Any] | None:
        """Claim, in one statement, up to `need` of the jobs `candidates` would read, none
        of a limited queue or type past its room in `rooms`; None if this store cannot
        (then they are read and claimed in rounds). The claimed rows, or [] when the store
        reads them once its transaction has committed (PostgreSQL: in the COMMIT's trip)."""

    def rate_starts(self) -> list[tuple[str, str, str, int, int]]:
        """(scope, name, key, starts, oldest start's time) within each rate limit's
        window at `now` (below)."""

    now: int
    """The store's clock for this claim (ms): what it stamps `claimed_at` with."""

    def record_starts(self, starts: dict[StartKey, int], opens: int | None) -> None:
        """Write this claim's starts; `opens`: when a full rate limit next has room."""


def claim_limited(
    reads: LimitedReads, limits: ClaimLimits, types: Sequence[str], limit: int
) -> list[Any]:
    """Claim up to `limit` jobs under every limit in `limits`; the claimed rows."""
    caps, rates = limits.caps, limits.rates
    held = reads.held() if any(scope != "key" for scope, _ in caps) else {}
    window = Window(rates, reads.rate_starts() if rates else (), reads.now if rates else 0)
    room = Room(caps, held, rates, window.used)
    all_keyed = sorted({name for scope, name in (*caps, *rates) if scope == "key"})
    keyed = [name for name in all_keyed if not types or name in types]
    for name in keyed:
        held_keys = reads.held_keys(name) if ("key", name) in caps else {}
        room.open_keys(name, held_keys, window.keys_used(name))
    paused = reads.paused()
    if not rates and not keyed:  # nothing a candidate could be refused by but its room
        skip_queues = sorted({*room.full("queue"), *paused.get("queue", ())})
        skip_types = sorted({*room.full("type"), *all_keyed, *paused.get("type", ())})
        fitting = reads.claim_fitting(limit, skip_queues, skip_types, dict(room.left))
        if fitting is not None:
            return fitting
    rows: list[Any] = []
    taken: list[Candidate] = []
    for _ in range(MAX_ROUNDS):
        need = limit - len(rows)
        if need <= 0:
            break
        skip_queues = sorted({*room.full("queue"), *paused.get("queue", ())})
        skip_types = sorted({*room.full("type"), *all_keyed, *paused.get("type", ())})
        candidates = reads.candidates(need, skip_queues, skip_types, dict(room.left))
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
                taken.append(candidate)
            else:
                refused = True
        if chosen:
            rows += reads.claim_ids(chosen, len(rows))
        if not refused or not chosen:
            break
    if rates:
        starts = starts_of(rates, taken)
        reads.record_starts(starts, window.opens(starts))
    return rows


def _keyed(
    reads: LimitedReads, name: str, room: Room, skip_queues: Sequence[str], need: int
) -> list[Candidate]:
    """Pending jobs of key-limited type `name`, none of a key at its limit."""
    window = 2 * need + 8
    head = reads.type_head(name, window, skip_queues)
    keys = room.keys[name]
    cap = room.key_cap[name]
    fits = [c for c in head if c[5] is None or keys.get(c[5], cap) > 0]
    if len(fits) >= need or len(head) < window:
        return fits
    rooms: dict[str, int] = {}
    for key in _keys_in_turn(reads, name, reads.cursors.get(name), need + len(keys) + 1):
        left = keys.get(key, cap)
        if left > 0:
            rooms[key] = min(left, need)
            reads.cursors[name] = key
            if len(rooms) >= need:
                break
    return [c for c in head if c[5] is None] + reads.key_heads(name, rooms, skip_queues)


def _keys_in_turn(reads: LimitedReads, name: str, after: str | None, most: int) -> Iterator[str]:
    """Up to `most` keys of type `name` with pending jobs: those after `after`, then
    from the first one round to `after`."""
    wrapped = after is None
    key = reads.next_key(name, after)
    for _ in range(most):
        if key is None:
            if wrapped:
                return
            wrapped = True
            key = reads.next_key(name, None)
            continue
        if wrapped and after is not None and key > after:
            return
        yield key
        key = reads.next_key(name, key)
