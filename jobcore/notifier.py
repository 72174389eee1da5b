"""Hook notifications of a worker: off the loop, and one plugin never holds up another.

A slow or failing observer never holds up claims or outcome commits: the loop
collects the notifications of one iteration and hands them over after its
commit, in commit order, to the notifier thread. That thread calls the built-in
plugins' implementations (the lifecycle event log) itself, and hands each other
plugin its share of the iteration's notifications at once: every such plugin
has a lane, a thread of its own started on its first notification, which calls
its implementations one after another. So a plugin sees its notifications in
commit order (a job's `claimed` before its `completed`), and a plugin stuck in a
hook delays only itself.

While a plugin's thread has been in one call for `STUCK_AFTER` seconds its name
and hook are logged as a warning (and again, with how long, when it returns).
A lane holds at most `BACKLOG` notifications; while it is full, newer job ones for
that plugin are dropped (the older ones it holds are kept, in order; the worker's
own `jobcore_worker_*` notifications never are), counted,
and logged with the plugin's name (the first at once, then at most once a
minute, and the total when the worker stops). Idle lanes wait on a condition:
no polling. The notifier thread wakes once a second only while some lane holds
notifications or is reported stuck, to watch them. Notices another thread hands
over (`put`: the keeper's, of a sweep) go the same way.
"""

from __future__ import annotations

import logging
import queue as stdqueue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import pluggy

from jobcore.plugins import BUILTIN_PLUGINS, call_notification, capturing_notices

log = logging.getLogger("jobcore.worker")

STUCK_AFTER = 10.0  # seconds in one notification call before the plugin is reported stuck
BACKLOG = 10_000  # notifications a plugin's lane holds; newer ones are dropped while full
REPORT_EVERY = 60.0  # seconds between two reports of drops for one plugin
WATCH_EVERY = 1.0  # seconds between two looks at busy lanes
# a full lane still takes these (`jobcore_worker_stopped`: plugins flush what they hold)
WORKER_HOOKS = "jobcore_worker_"

Notice = tuple[str, dict[str, Any]]  # hook name, keyword arguments
Work = tuple[pluggy.HookImpl, str, dict[str, Any]]  # one call a lane makes


class Lane:
    """One plugin's notifications, called in order on a thread of its own."""

    def __init__(self, plugin: str, limit: int) -> None:
        self.plugin = plugin
        self.limit = limit
        self._cond = threading.Condition(threading.Lock())
        self._waiting: deque[Work] = deque()
        self._closing = False
        self.held = 0  # waiting or being called (under _cond); read unlocked by the watcher
        self.dropped = 0  # under _cond
        self.calling: str | None = None  # the hook its thread is in (its thread writes)
        self.calls = 0  # calls made (its thread writes)
        self._calls_before = 0  # `calls` when its thread took what it is calling
        self.thread: threading.Thread | None = None
        # the watcher's (notifier thread's) own state
        self.seen_calls = 0
        self.seen_at = 0.0
        self.stuck = False  # reported stuck and not yet returned
        self.dropped_told = 0
        self.tell_drops_at = 0.0

    def give(self, work: list[Work]) -> int:
        """Hold `work` for the thread; returns how many calls were dropped (lane full)."""
        with self._cond:
            if not self.held:  # it was idle: the watcher's clock for it starts now
                self.seen_calls, self.seen_at = self.calls, time.monotonic()
            room = max(self.limit - self.held, 0)
            dropped = 0
            if len(work) > room:  # the worker's own start and stop are never dropped
                kept = [item for item in work[room:] if item[1].startswith(WORKER_HOOKS)]
                dropped = len(work) - room - len(kept)
                work = work[:room] + kept
                self.dropped += dropped
            if work:
                self._waiting.extend(work)
                self.held += len(work)
                self._cond.notify()
        if self.thread is None and work:
            self.thread = threading.Thread(
                target=self._main, name=f"jobcore-notify-{self.plugin}", daemon=True
            )
            self.thread.start()
        return dropped

    def undelivered(self) -> int:
        """Notifications held and not yet called, or being called (read without the lock)."""
        return self.held - (self.calls - self._calls_before)

    def close(self) -> None:
        """Let the thread call what it holds, then end."""
        with self._cond:
            self._closing = True
            self._cond.notify()

    def _main(self) -> None:
        taken = 0
        while True:
            with self._cond:
                self.held -= taken
                self._calls_before = self.calls
                while not self._waiting and not self._closing:
                    self._cond.wait()
                if not self._waiting:
                    return
                work, self._waiting = self._waiting, deque()
            taken = len(work)
            for impl, hook_name, kwargs in work:
                self.calling = hook_name
                call_notification(impl, hook_name, kwargs)
                self.calls += 1
            self.calling = None


# a hook's implementations to call on the notifier thread, and the others with their lanes
Route = tuple[list[pluggy.HookImpl], list[tuple[Lane, pluggy.HookImpl]]]


class Notifier:
    """Collects notifications per loop iteration and delivers them off the loop."""

    def __init__(
        self,
        pm: pluggy.PluginManager,
        *,
        stuck_after: float | None = None,
        backlog: int | None = None,
    ) -> None:
        self.pm = pm
        self.stuck_after = STUCK_AFTER if stuck_after is None else stuck_after
        self.backlog = BACKLOG if backlog is None else backlog
        self._notices: stdqueue.SimpleQueue[list[Notice] | None] = stdqueue.SimpleQueue()
        self._batch: list[Notice] = []  # notifications of the current iteration
        self._thread: threading.Thread | None = None
        self.lanes: dict[str, Lane] = {}  # by plugin name; the notifier thread's
        self._routes: dict[str, tuple[list[pluggy.HookImpl], Route]] = {}  # by hook name
        self._watch_at = 0.0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._main, name="jobcore-notifier", daemon=True)
        self._thread.start()

    def announce(self, hook_name: str, **kwargs: Any) -> None:
        """Queue a notification; `flush` hands the batch to the notifier thread."""
        self._batch.append((hook_name, kwargs))

    def flush(self) -> None:
        if self._batch:
            self._notices.put(self._batch)
            self._batch = []

    def put(self, calls: list[Callable[[], None]]) -> None:
        """Run calls that notify (`jobcore.plugins.notify`) here, from a thread other than
        the loop's; what they notify through this worker's plugin manager is delivered
        as the loop's notifications are, after those handed over before."""
        notices: list[Notice] = []

        def take(pm: pluggy.PluginManager, hook_name: str, kwargs: dict[str, Any]) -> bool:
            if pm is not self.pm:
                return False
            notices.append((hook_name, kwargs))
            return True

        with capturing_notices(take):
            for call in calls:
                try:
                    call()
                except Exception:
                    log.exception("notification failed")
        if notices:
            self._notices.put(notices)

    def stop(self, timeout: float = 10) -> None:
        """Flush, deliver what was given (waiting at most `timeout` seconds), and end.

        A plugin already reported stuck is not waited for; one still busy at the
        deadline is named, with how many of its notifications were not delivered.
        """
        deadline = time.monotonic() + timeout
        self.flush()
        self._notices.put(None)
        if self._thread is not None:
            self._thread.join(timeout=timeout)
            if self._thread.is_alive():
                log.warning("notifications were still being delivered %ss after stop", timeout)
                return
        for lane in list(self.lanes.values()):
            if lane.thread is not None and not (lane.stuck and lane.calls == lane.seen_calls):
                lane.thread.join(timeout=max(deadline - time.monotonic(), 0))
        for lane in list(self.lanes.values()):
            self._tell_drops(lane, time.monotonic(), final=True)
            if lane.thread is not None and lane.thread.is_alive():
                log.warning(
                    "plugin %s is still in %s as the worker stops: %d notification(s) for it "
                    "not delivered",
                    lane.plugin,
                    lane.calling or "a notification hook",
                    lane.undelivered(),
                )

    # -- the notifier thread ---------------------------------------------------------

    def _main(self) -> None:
        get = self._notices.get
        while True:
            if any(lane.held or lane.stuck for lane in self.lanes.values()):
                try:
                    notices = get(timeout=WATCH_EVERY)
                except stdqueue.Empty:
                    self._watch(time.monotonic())
                    continue
            else:
                notices = get()
            if notices is None:
                break
            try:
                self._deliver(notices)
            except BaseException:  # `call_notification` isolates hooks; this is a last guard
                log.exception("notification failed")
            if self.lanes:
                now = time.monotonic()
                if now >= self._watch_at:
                    self._watch(now)
        for lane in self.lanes.values():
            lane.close()

    def _deliver(self, notices: list[Notice]) -> None:
        """Call the built-in plugins here; hand every other plugin its calls, in order."""
        routes: dict[str, Route] = {}
        handed: dict[Lane, list[Work]] = {}
        for hook_name, kwargs in notices:
            route = routes.get(hook_name)
            if route is None:
                route = routes[hook_name] = self._route(hook_name)
            here, laned = route
            for impl in here:
                call_notification(impl, hook_name, kwargs)
            for lane, impl in laned:
                work = handed.get(lane)
                if work is None:
                    work = handed[lane] = []
                work.append((impl, hook_name, kwargs))
        for lane, work in handed.items():
            if lane.give(work):
                self._tell_drops(lane, time.monotonic())

    def _route(self, hook_name: str) -> Route:
        """Who implements the hook now, in pluggy's call order: built-ins and the others."""
        impls = getattr(self.pm.hook, hook_name).get_hookimpls()
        known = self._routes.get(hook_name)
        if known is not None and known[0] == impls:
            return known[1]
        here: list[pluggy.HookImpl] = []
        laned: list[tuple[Lane, pluggy.HookImpl]] = []
        for impl in reversed(impls):
            if impl.plugin_name in BUILTIN_PLUGINS:
                here.append(impl)
                continue
            lane = self.lanes.get(impl.plugin_name)
            if lane is None:
                lane = self.lanes[impl.plugin_name] = Lane(impl.plugin_name, self.backlog)
            laned.append((lane, impl))
        self._routes[hook_name] = (impls, (here, laned))
        return here, laned

    def _watch(self, now: float) -> None:
        """Report plugins stuck in a call, and those that returned after being reported."""
        self._watch_at = now + WATCH_EVERY
        for lane in self.lanes.values():
            calls = lane.calls
            if calls != lane.seen_calls or not lane.held:
                if lane.stuck:
                    log.warning(
                        "plugin %s returned after %.0fs in a notification hook",
                        lane.plugin,
                        now - lane.seen_at,
                    )
                    lane.stuck = False
                lane.seen_calls, lane.seen_at = calls, now
            elif not lane.stuck and now - lane.seen_at >= self.stuck_after:
                lane.stuck = True
                log.warning(
                    "plugin %s has been in %s for %.0fs; its notifications wait (%d, at most "
                    "%d, then newer ones are dropped) while other plugins and the event log "
                    "carry on",
                    lane.plugin,
                    lane.calling or "a notification hook",
                    now - lane.seen_at,
                    lane.undelivered(),
                    lane.limit,
                )
            self._tell_drops(lane, now)

    def _tell_drops(self, lane: Lane, now: float, *, final: bool = False) -> None:
        dropped = lane.dropped
        if dropped == lane.dropped_told or (now < lane.tell_drops_at and not final):
            return
        log.warning(
            "plugin %s is behind: %d notification(s) for it dropped%s (%d in all; it may hold %d)",
            lane.plugin,
            dropped - lane.dropped_told,
            " since the last report" if lane.dropped_told else "",
            dropped,
            lane.limit,
        )
        lane.dropped_told = dropped
        lane.tell_drops_at = now + REPORT_EVERY
