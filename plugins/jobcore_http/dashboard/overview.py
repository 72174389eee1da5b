"""The overview's numbers, from two snapshots shared by every request.

`Counts` (outstanding work: totals by status from the `(status, id)` index,
and the scheduled/pending/claimed rows by type and queue) is cheap and kept
fresh. `History` (finished jobs by type and queue, finished per minute over
the day, who ran them) reads the whole table, so it is refreshed far less
often. Neither is computed per request: a snapshot is re-taken only when the
store changed (the reader's change token: SQLite's `data_version`, or
PostgreSQL's event sequence; a cheap check per request) and, when taking it is not cheap, at most every `factor x (time the
last one took)`; a slow one is re-taken in a background thread while requests
get the previous one with its age.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Generic, TypeVar

from jobcore.timeutil import now_ms
from jobcore_http.dashboard.reader import Reader

log = logging.getLogger("jobcore.http.dashboard")

MINUTE_MS = 60_000
DAY_MS = 86_400_000
CHEAP_S = 0.02
UNFINISHED = ("scheduled", "pending", "claimed")

Key = tuple[str, str, str]  # (status, type, queue)


@dataclass(slots=True)
class Counts:
    """Totals by status, and unfinished jobs by (status, type, queue)."""

    totals: dict[str, int] = field(default_factory=dict)
    unfinished: dict[Key, int] = field(default_factory=dict)
    oldest_pending: dict[str, int] = field(default_factory=dict)  # queue -> run_at

    @property
    def total(self) -> int:
        return sum(self.totals.values())


@dataclass(slots=True)
class History:
    """Finished jobs by (status, type, queue); per minute over the last day; workers seen."""

    finished: dict[Key, int] = field(default_factory=dict)
    minutes: dict[int, list[int]] = field(default_factory=dict)  # minute -> [completed, failed]
    workers_seen: dict[str, int] = field(default_factory=dict)  # worker -> last finish, ms


def count(reader: Reader) -> Counts:
    counts = Counts()
    for status, n in reader.rows("SELECT status, count(*) FROM jobs GROUP BY status"):
        counts.totals[status] = n
    for status, type_name, queue, n, oldest in reader.rows(
        "SELECT status, type, queue, count(*), min(CASE WHEN status = 'pending' THEN run_at END) "
        "FROM jobs WHERE status IN ('scheduled', 'pending', 'claimed') GROUP BY 1, 2, 3"
    ):
        counts.unfinished[(status, type_name, queue)] = n
        if oldest is not None:
            counts.oldest_pending[queue] = min(oldest, counts.oldest_pending.get(queue, oldest))
    return counts


def history(reader: Reader, now: int) -> History:
    out = History()
    for status, type_name, queue, n in reader.rows(
        "SELECT status, type, queue, count(*) FROM jobs NOT INDEXED "
        "WHERE status IN ('completed', 'failed', 'cancelled') GROUP BY 1, 2, 3"
    ):
        out.finished[(status, type_name, queue)] = n
    for minute, status, worker, n in reader.rows(
        "SELECT completed_at / 60000, status, locked_by, count(*) FROM jobs "
        "WHERE completed_at >= :since GROUP BY 1, 2, 3",
        {"since": now - DAY_MS},
    ):
        if status in ("completed", "failed"):
            slot = out.minutes.setdefault(int(minute), [0, 0])
            slot[0 if status == "completed" else 1] += n
        if worker:
            seen = int(minute) * MINUTE_MS
            out.workers_seen[worker] = max(seen, out.workers_seen.get(worker, seen))
    return out


def by(keys: dict[Key, int], position: int) -> dict[str, dict[str, int]]:
    """`{type or queue: {status: n}}` from `(status, type, queue)` counts (position 1 or 2)."""
    out: dict[str, dict[str, int]] = {}
    for key, n in keys.items():
        row = out.setdefault(key[position], {})
        row[key[0]] = row.get(key[0], 0) + n
    return out


T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Taken(Generic[T]):
    """A computed value, when it was computed (ms), how long that took (s), and whether the
    store has changed since (`current` False: a newer value is on its way)."""

    value: T
    taken_at: int
    took_s: float
    current: bool = True


class ChangeCache(Generic[T]):
    """Hands out the latest result of `compute`; re-computes as the module docstring says."""

    def __init__(
        self,
        token: Callable[[], int],
        compute: Callable[[], T],
        name: str,
        *,
        factor: float = 10.0,
    ) -> None:
        self.token = token  # changes whenever the store changed
        self.compute = compute
        self.name = name
        self.factor = factor
        self._taken: Taken[T] | None = None
        self._lock = threading.Lock()
        self._computed = threading.Condition(self._lock)
        self._refreshing = False
        self._version: int | None = None  # the change token at the last compute

    def get(self) -> Taken[T]:
        """The value to show now, computing it first if there is none yet."""
        with self._lock:
            if self._taken is None and not self._refreshing:
                return self._take(self.token())
            while self._taken is None and self._refreshing:  # the first one is under way
                self._computed.wait()
        found = self.peek()
        if found is not None:
            return found
        with self._lock:
            return self._take(self.token())

    def peek(self) -> Taken[T] | None:
        """The value to show now, or None while the first one is still being computed."""
        with self._lock:
            version = self.token()
            taken = self._taken
            if taken is None:
                if not self._refreshing:
                    self._start(version)
                return None
            if version == self._version:
                return taken
            if not self._due(taken):
                return replace(taken, current=False)
            if taken.took_s < CHEAP_S:
                return self._take(version)
            self._start(version)
            return replace(taken, current=False)

    def _due(self, taken: Taken[T]) -> bool:
        if self._refreshing:
            return False
        if taken.took_s < CHEAP_S:
            return True
        ttl = min(300.0, max(1.0, self.factor * taken.took_s))
        return (now_ms() - taken.taken_at) / 1000 >= ttl

    def _start(self, version: int) -> None:
        self._refreshing = True
        threading.Thread(target=self._refresh, args=(version,), name=self.name, daemon=True).start()

    def _run(self) -> Taken[T]:
        started, at = time.perf_counter(), now_ms()
        value = self.compute()
        return Taken(value, at, time.perf_counter() - started)

    def _take(self, version: int) -> Taken[T]:
        taken = self._run()
        self._taken, self._version = taken, version
        return taken

    def _refresh(self, version: int) -> None:
        taken: Taken[T] | None = None
        try:
            taken = self._run()
        except Exception:
            log.exception("%s: computing failed; the next request tries again", self.name)
        finally:
            with self._lock:
                if taken is not None:
                    self._taken, self._version = taken, version
                self._refreshing = False
                self._computed.notify_all()
