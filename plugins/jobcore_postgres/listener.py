"""LISTEN/NOTIFY wake-ups: one listening connection per process and store, shared by all waiters.

Every transaction that appends events sends one empty notification on the
store's channel (the server folds a transaction's identical notifications
into one). The listener thread counts them; `Listener.wait` blocks until the
count moves past what the caller saw. A notification that may bring work (not
`NO_WORK`: its events did more than claim or end jobs) also wakes the process's
`jobcore.wakeup` subscribers of the store (workers, the hub), so they need not
poll, and no worker claims again because another one claimed or finished a job;
such notifications are also counted apart (`work_count`), so a worker does not
take its own commits' notifications for a change worth a full poll. Every
notification, work or not, wakes the subscribers of `wakeup.every_change` (the
hub's waiter, which streams claims and outcomes too). Notifications of changed limits
or rates (`LIMITS_CHANGED`) are also counted apart (`limits_count`): a store then reads
again whether any exist, at its next claim. While the listening connection is down (server restart) waiters
are told "maybe changed" at a short interval, so a worker falls back to polling
until the listener reconnects.
"""

from __future__ import annotations

import logging
import threading
import time

import psycopg

from jobcore import wakeup
from jobcore_postgres.errors import first_line
from jobcore_postgres.schema import LIMITS_CHANGED, NO_WORK

log = logging.getLogger("jobcore.postgres")

DOWN_POLL = 0.25  # seconds between "maybe changed" answers while the listener is down


class Listener:
    """A thread holding one `LISTEN` connection; counts notifications."""

    def __init__(self, conninfo: str, channel: str, where: str, wake_key: str) -> None:
        self.conninfo = conninfo
        self.channel = channel
        self.where = where
        self.wake_key = wake_key
        self.count = 0  # every notification
        self.work_count = 0  # the ones that may bring work or a cancel request: not NO_WORK
        self.limits_count = 0  # the ones of changed limits or rates (LIMITS_CHANGED)
        self.connected = False
        self.users = 0
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"jobcore-listen-{channel}", daemon=True
        )

    def start(self, wait: float = 5.0) -> None:
        """Start listening; waits (bounded) until LISTEN is in place, so no commit is missed."""
        self._thread.start()
        self._ready.wait(wait)

    def stop(self) -> None:
        self._stop.set()

    def _bump(self, *, wake: bool = True, limits: bool = False) -> None:
        with self._cond:
            self.count += 1
            if limits:  # before the waiters wake: the claim they make reads the limits anew
                self.limits_count += 1
            if wake:
                self.work_count += 1
            self._cond.notify_all()
        if wake:
            wakeup.notify(self.wake_key)
        wakeup.notify(wakeup.every_change(self.wake_key))

    def _run(self) -> None:
        delay = 0.05
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.conninfo, autocommit=True, connect_timeout=5) as conn:
                    conn.execute(f"LISTEN {self.channel}")
                    self.connected = True
                    delay = 0.05
                    self._bump(limits=True)  # anything may have happened while not listening
                    self._ready.set()
                    while not self._stop.is_set():
                        for notify in conn.notifies(timeout=0.5):
                            payload = notify.payload
                            self._bump(wake=payload != NO_WORK, limits=payload == LIMITS_CHANGED)
            except psycopg.Error as exc:
                if self.connected:
                    log.warning("listening on %s: %s; reconnecting", self.where, first_line(exc))
                self.connected = False
                self._ready.set()
                self._bump()
                # Until the next attempt, "maybe changed" every DOWN_POLL: looks that do not
                # wait (the hub's waiter, a worker's) hear nothing else while we are down.
                retry_at = time.monotonic() + delay
                while not self._stop.wait(min(DOWN_POLL, max(0.0, retry_at - time.monotonic()))):
                    if time.monotonic() >= retry_at:
                        break
                    self._bump()
                delay = min(delay * 2, 2.0)
        self.connected = False

    def wait(self, seen: int, timeout: float, *, work: bool = False) -> tuple[int, bool]:
        """Block until the count differs from `seen` or `timeout` passes: (count, maybe changed).

        With `work`, the count is `work_count`: notifications of claims and outcomes alone
        (`NO_WORK`) do not end the wait.
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._count(work) == seen:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                if not self.connected:
                    self._cond.wait(min(remaining, DOWN_POLL))
                    if not self.connected:
                        return self._count(work), True  # maybe changed: let the caller look
                    continue
                self._cond.wait(remaining)
            count = self._count(work)
            return count, count != seen

    def _count(self, work: bool) -> int:
        return self.work_count if work else self.count


_listeners: dict[tuple[str, str], Listener] = {}
_registry_lock = threading.Lock()


def acquire(conninfo: str, channel: str, where: str, wake_key: str) -> Listener:
    """The process's listener for this store, started on first use."""
    with _registry_lock:
        listener = _listeners.get((conninfo, channel))
        if listener is None:
            listener = Listener(conninfo, channel, where, wake_key)
            _listeners[(conninfo, channel)] = listener
            listener.start()
        listener.users += 1
        return listener


def release(listener: Listener) -> None:
    """Drop one user; the last one stops the thread and its connection."""
    with _registry_lock:
        listener.users -= 1
        if listener.users <= 0:
            listener.stop()
            _listeners.pop((listener.conninfo, listener.channel), None)
