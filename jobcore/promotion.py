"""When a worker's claims also promote due scheduled jobs, and when it must look again.

Scheduled jobs can only become due by the clock or by others' writes. A store that
reads the next due time in the claim's own trip (`scheduled_seen`) is asked to promote
only when a scheduled job may be due: by that reading, at the periodic poll, or before
any reading. Others' commits that scheduled a job are read by the full poll they set
off; if that job is due already, the next iteration promotes it. Other stores promote
at every full poll and are asked `next_due()` after it.
"""

from __future__ import annotations

from typing import Any

from jobcore.storage import powers

DUE_AGAIN = 0.005  # seconds: first wait to promote again after one left a due job scheduled
DUE_AGAIN_MAX = 0.1  # seconds: the longest such wait (a job may stay locked for long)


class PromotionClock:
    """The worker loop's periodic poll and the earliest scheduled job's due time."""

    def __init__(self, storage: Any, poll_interval: float) -> None:
        self.storage = storage
        self.poll_interval = poll_interval
        self.reads_ahead = powers.reads_ahead(storage)
        self.next_poll = 0.0  # monotonic: the next periodic poll
        self.next_due: float | None = None  # monotonic: the earliest scheduled job is due
        self._ahead_seen = False  # a claim has read it: promotion may be left out until due
        self._due_again = 0.0  # wait before promoting again, while a due job stays scheduled

    def due(self, mono: float) -> bool:
        """The periodic poll is due, or a scheduled job may be by the last reading."""
        return mono >= self.next_poll or (self.next_due is not None and mono >= self.next_due)

    def choose(self, mono: float, *, full_poll: bool, want_claim: bool) -> tuple[bool, bool]:
        """(promote, look_ahead) for this iteration's commit."""
        ahead = want_claim and full_poll and self.reads_ahead
        promote = full_poll and (not ahead or not self._ahead_seen or self.due(mono))
        return promote, ahead

    def claimed(self, mono: float, *, promote: bool, ahead: bool) -> None:
        """After a full poll's claim: when the next poll is, and when a job is next due."""
        if promote:
            self.next_poll = mono + self.poll_interval
        self.next_due = self._due_after_claim(mono, ahead)
        if self.next_due is None or self.next_due > mono:
            self._due_again = 0.0
        elif promote:
            # promoted, and one is still due: due since the promotion's statement, past the
            # promotion limit, or locked by another transaction (promotion skips locked
            # rows). Look again soon, then less often: not in a tight loop.
            self._due_again = min(
                max(2 * self._due_again, DUE_AGAIN), DUE_AGAIN_MAX, self.poll_interval
            )
            self.next_due = mono + self._due_again

    def retry_due(self, due: float) -> None:
        """A job this worker retried is due at `due` (monotonic)."""
        self.next_due = due if self.next_due is None else min(self.next_due, due)

    def _due_after_claim(self, mono: float, ahead: bool) -> float | None:
        """When the earliest scheduled job is due (monotonic), from the claim's look-ahead
        reading if it took one, else asked of the store."""
        seen = self.storage.scheduled_seen() if ahead else None
        if seen is not None:
            self._ahead_seen = True
            due, now = seen
        else:
            due = self.storage.next_due()
            if due is None:
                return None
            now = self.storage.now()
        return None if due is None else mono + max(0, due - now) / 1000
