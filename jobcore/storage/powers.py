"""A backend's optional powers, beside the `Storage` protocol (`jobcore.storage.base`).

A backend may offer more than `Storage` asks; the worker and the hub use a power when
the storage has it and fall back to the plain protocol when it does not. Each power is
a protocol below, and the worker and the hub ask for it only through the functions
here (one place that knows the names), never by probing attributes of their own:

- `PushesChanges`: `pushes_changes` (True while every commit by any process wakes
  this process's `jobcore.wakeup` subscribers of `wake_key`, so nobody needs to poll)
  and `wait_for_work(timeout)` (as `wait_for_change`, but claims and outcomes alone
  are no change). PostgreSQL's LISTEN/NOTIFY.
- `ReadsAhead`: `scheduled_seen()` (the earliest scheduled `run_at` and the store's
  clock as the thread's last `commit_batch` read them), so the worker needs no
  `next_due()` trip after a claim. PostgreSQL.
- `Prefetches`: `default_prefetch`, the worker's prefetch when no setting names one
  (a trip to the server costs more per commit: larger batches pay off). PostgreSQL.
- `KeepsHubState`: `hub_store()`, the hub's own state (`jobcore.storage.hub_state`)
  in this store. Every backend a hub runs on offers it (SQLite and PostgreSQL do).
- `WatchesWrites`: `watch_writes(cond)`, a `WriteWatch` that tells a polling waiter
  how long it may sleep and notifies `cond` when others write. SQLite on Linux.

docs/storage-backends.md says what a backend implements in all; the conformance suite
(`jobcore.testing.contract`) checks the powers a backend declares.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from jobcore.storage.hub_state import HubStore


@runtime_checkable
class PushesChanges(Protocol):
    @property
    def pushes_changes(self) -> bool:
        """True while every commit (by any process) wakes this process's subscribers."""

    def wait_for_work(self, timeout: float) -> bool:
        """As `wait_for_change`, but True only once work may have been added or made due,
        or a cancel requested (claims and outcomes alone are no change)."""


@runtime_checkable
class ReadsAhead(Protocol):
    def scheduled_seen(self) -> tuple[int | None, int] | None:
        """(earliest scheduled `run_at` or None, the store's clock) as this thread's last
        `commit_batch(look_ahead=...)` read them; None if it was not asked to."""


@runtime_checkable
class Prefetches(Protocol):
    default_prefetch: int
    """The worker's prefetch when no setting names one."""


@runtime_checkable
class KeepsHubState(Protocol):
    def hub_store(self) -> HubStore:
        """The hub's tokens, workers registry and job listing in this store."""


class WriteWatch(Protocol):
    def look_in(self, remaining: float, interval: float) -> float:
        """Seconds until a waiter (holding the watch's `cond`) looks for a commit, given
        `remaining` until its deadline and its polling `interval`."""

    def close(self) -> None:
        """Stop watching."""


@runtime_checkable
class WatchesWrites(Protocol):
    def watch_writes(self, cond: threading.Condition) -> WriteWatch:
        """A watch that notifies `cond` when a sleeping waiter should look again."""


class Polling:
    """The `WriteWatch` of a store that offers none: the waiter looks every interval."""

    def look_in(self, remaining: float, interval: float) -> float:
        return min(remaining, interval)

    def close(self) -> None:
        pass


def write_watch(storage: Any, cond: threading.Condition) -> WriteWatch:
    """`storage`'s `watch_writes(cond)`, or `Polling`."""
    watch = getattr(storage, "watch_writes", None)
    return watch(cond) if callable(watch) else Polling()


def pushes_changes(storage: Any) -> bool:
    """Whether `storage` pushes every change to this process right now."""
    return bool(getattr(storage, "pushes_changes", False))


def change_look(storage: Any) -> Callable[[float], bool]:
    """What the worker calls to look for new work: `wait_for_work` while the store pushes
    its changes and offers it, else `wait_for_change`."""
    look: Callable[[float], bool] = storage.wait_for_change
    if pushes_changes(storage):
        look = getattr(storage, "wait_for_work", look)
    return look


def reads_ahead(storage: Any) -> bool:
    """Whether `storage` offers `scheduled_seen()`."""
    return callable(getattr(storage, "scheduled_seen", None))


def default_prefetch(storage: Any, fallback: int) -> int:
    """The store's `default_prefetch`, or `fallback` when it names none."""
    prefetch: int = getattr(storage, "default_prefetch", fallback)
    return prefetch


def hub_store_of(storage: Any) -> HubStore | None:
    """The hub's state in `storage` (its `hub_store()`), or None when it keeps none."""
    factory = getattr(storage, "hub_store", None)
    if not callable(factory):
        return None
    store: HubStore = factory()
    return store


__all__ = [
    "KeepsHubState",
    "Polling",
    "Prefetches",
    "PushesChanges",
    "ReadsAhead",
    "WatchesWrites",
    "WriteWatch",
    "change_look",
    "default_prefetch",
    "hub_store_of",
    "pushes_changes",
    "reads_ahead",
    "write_watch",
]
