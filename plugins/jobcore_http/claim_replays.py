"""Claim answers by the agent's claim key, so a claim retried after a lost answer gets them again.

An agent sends `X-Idempotency-Key` with `POST /api/jobs/claim` and sends the same key
again when the answer never arrived (a reset, a timeout). The hub remembers, per
(worker, key), which jobs under which leases it answered; the repeat answers those
still held by that worker under those leases instead of claiming more. Kept in memory
(bounded, newest kept): a restarted hub has none, and those jobs' leases lapse as before.
"""

from __future__ import annotations

from collections import OrderedDict

MAX_KEY_LENGTH = 200
MAX_REMEMBERED = 4096


class ClaimReplays:
    """(worker, key) -> [(job id, lease id)] of the claim's answer. Event loop only."""

    def __init__(self, limit: int = MAX_REMEMBERED) -> None:
        self.limit = limit
        self._answers: OrderedDict[tuple[str, str], list[tuple[str, str | None]]] = OrderedDict()

    @staticmethod
    def usable(key: str | None) -> bool:
        return bool(key) and len(key or "") <= MAX_KEY_LENGTH

    def get(self, worker: str, key: str) -> list[tuple[str, str | None]] | None:
        return self._answers.get((worker, key))

    def remember(self, worker: str, key: str, leases: list[tuple[str, str | None]]) -> None:
        self._answers[(worker, key)] = leases
        self._answers.move_to_end((worker, key))
        while len(self._answers) > self.limit:
            self._answers.popitem(last=False)
