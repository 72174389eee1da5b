"""Claim answers by the agent's claim key, so a claim retried after a lost answer gets them again.

An agent sends `X-Idempotency-Key` with `POST /api/jobs/claim` and sends the same key
again when the answer never arrived (a reset, a timeout); a new key means the last
answer arrived. So the hub keeps, per agent, only its last answered key and which jobs
under which leases that answer carried; a repeat of that key answers those still held
by the agent under those leases instead of claiming more. Kept in memory (one entry per
agent, at most `MAX_AGENTS`, least recently claiming dropped first): a restarted hub has
none, and those jobs' leases lapse as before.
"""

from __future__ import annotations

from collections import OrderedDict

MAX_KEY_LENGTH = 200
MAX_AGENTS = 4096

Leases = list[tuple[str, str | None]]  # (job id, lease id) of each job of one answer


class ClaimReplays:
    """worker -> (key, leases) of its last answered claim. Event loop only."""

    def __init__(self, limit: int = MAX_AGENTS) -> None:
        self.limit = limit
        self._answers: OrderedDict[str, tuple[str, Leases]] = OrderedDict()

    @staticmethod
    def usable(key: str | None) -> bool:
        return bool(key) and len(key or "") <= MAX_KEY_LENGTH

    def get(self, worker: str, key: str) -> Leases | None:
        last = self._answers.get(worker)
        return last[1] if last is not None and last[0] == key else None

    def remember(self, worker: str, key: str, leases: Leases) -> None:
        self._answers[worker] = (key, leases)
        self._answers.move_to_end(worker)
        while len(self._answers) > self.limit:
            self._answers.popitem(last=False)
