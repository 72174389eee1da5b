"""The overview's numbers: one snapshot of whole-table aggregates, shared by every request.

Counting a million rows takes a few hundred milliseconds, so requests never do
it. The snapshot is re-taken only when the store changed (SQLite's
`data_version` on a watch connection, a microsecond check) and, on a large
store, at most every `10 x (time the last count took)` (1 s to 60 s): a big
store is counted in a background thread while requests get the previous
snapshot and its age; a small one (counted in under 20 ms) is counted at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import apsw

from jobcore.timeutil import now_ms
from jobcore_http.dashboard.reader import Reader

log = logging.getLogger("jobcore.http.dashboard")

MINUTE_MS = 60_000
DAY_MS = 86_400_000
CHEAP_S = 0.02


@dataclass(slots=True)
class Snapshot:
    """Whole-table aggregates."""

    counts: dict[str, int] = field(default_factory=dict)
    by_type: dict[str, dict[str, int]] = field(default_factory=dict)
    by_queue: dict[str, dict[str, int]] = field(default_factory=dict)
    oldest_pending: dict[str, int] = field(default_factory=dict)
    finished: dict[int, list[int]] = field(default_factory=dict)  # minute -> [completed, failed]
    workers_seen: dict[str, int] = field(default_factory=dict)  # worker -> last activity ms

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def take(reader: Reader, now: int) -> Snapshot:
    """Count everything once (three scans of the jobs table)."""
    snap = Snapshot()
    by_type: defaultdict[str, dict[str, int]] = defaultdict(dict)
    by_queue: defaultdict[str, dict[str, int]] = defaultdict(dict)
    for status, type_name, queue, count, oldest in reader.rows(
        "SELECT status, type, queue, count(*), min(CASE WHEN status = 'pending' THEN run_at END) "
        "FROM jobs GROUP BY status, type, queue"
    ):
        snap.counts[status] = snap.counts.get(status, 0) + count
        by_type[type_name][status] = by_type[type_name].get(status, 0) + count
        by_queue[queue][status] = by_queue[queue].get(status, 0) + count
        if oldest is not None:
            snap.oldest_pending[queue] = min(oldest, snap.oldest_pending.get(queue, oldest))
    snap.by_type, snap.by_queue = dict(by_type), dict(by_queue)
    since = now - DAY_MS
    for minute, status, count in reader.rows(
        "SELECT completed_at / 60000, status, count(*) FROM jobs "
        "WHERE completed_at >= :since AND status IN ('completed', 'failed') GROUP BY 1, 2",
        {"since": since},
    ):
        slot = snap.finished.setdefault(int(minute), [0, 0])
        slot[0 if status == "completed" else 1] += count
    for worker, seen in reader.rows(
        "SELECT locked_by, max(coalesce(completed_at, heartbeat_at, claimed_at, updated_at)) "
        "FROM jobs WHERE locked_by IS NOT NULL AND updated_at >= :since GROUP BY locked_by",
        {"since": since},
    ):
        snap.workers_seen[worker] = seen
    return snap


T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Taken(Generic[T]):
    """A computed value, when it was computed (ms) and how long that took (s)."""

    value: T
    taken_at: int
    took_s: float


class ChangeCache(Generic[T]):
    """Hands out the latest result of `compute`; re-computes as the module docstring says."""

    def __init__(self, path: str, compute: Callable[[], T], name: str) -> None:
        self.path = path
        self.compute = compute
        self.name = name
        self._taken: Taken[T] | None = None
        self._lock = threading.Lock()
        self._computed = threading.Condition(self._lock)
        self._refreshing = False
        self._version: int | None = None  # watch connection's data_version at the last compute
        self._watch: apsw.Connection | None = None

    def _data_version(self) -> int:
        if self._watch is None:
            self._watch = apsw.Connection(self.path, flags=apsw.SQLITE_OPEN_READWRITE)
            self._watch.set_busy_timeout(5000)
        rows: list[Any] = self._watch.execute("PRAGMA data_version").fetchall()
        return int(rows[0][0])

    def close(self) -> None:
        with self._lock:
            if self._watch is not None:
                self._watch.close()
                self._watch = None

    def get(self) -> Taken[T]:
        """The value to show now (exact on a small store; of bounded age on a big one)."""
        with self._lock:
            while self._taken is None and self._refreshing:  # the first count is under way
                self._computed.wait()
            version = self._data_version()
            taken = self._taken
            if taken is None or (version != self._version and self._due(taken)):
                if taken is not None and taken.took_s >= CHEAP_S:
                    self._refreshing = True
                    threading.Thread(
                        target=self._refresh, args=(version,), name=self.name, daemon=True
                    ).start()
                    return taken
                return self._take(version)
            return taken

    def _due(self, taken: Taken[T]) -> bool:
        if self._refreshing:
            return False
        if taken.took_s < CHEAP_S:
            return True
        ttl = min(60.0, max(1.0, 10 * taken.took_s))
        return (now_ms() - taken.taken_at) / 1000 >= ttl

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

    def warm(self) -> None:
        """Compute in the background if nothing was computed yet (first page stays quick)."""
        with self._lock:
            if self._taken is not None or self._refreshing:
                return
            self._refreshing = True
            version = self._data_version()
        threading.Thread(target=self._refresh, args=(version,), name=self.name, daemon=True).start()
