"""Recurring jobs in the metrics, when the `cron` plugin is loaded beside this one.

Per schedule (attribute `jobcore.schedule.name`), read from the store at each
collection (one read of the schedules' table, shared by the three instruments; a
read that fails is raised by one of them, logged by the SDK, and not retried by the
others):

* `jobcore.schedule.overdue` (gauge, 0 or 1): its oldest time no scheduler has
  dealt with is more than its `grace` in the past (no worker or hub is running
  it, or its pass keeps failing);
* `jobcore.schedule.lag` (gauge, s): how long ago that time was (0: none due);
* `jobcore.schedule.runs` (counter): runs enqueued, as the store records them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

from opentelemetry.metrics import Meter, Observation

from jobcore import Queue

FRESH = 1.0  # seconds: one read serves the instruments of one collection


def cron_plugin(queue: Queue) -> ModuleType | None:
    """The `jobcore_cron` module when the queue's plugin manager has it loaded."""
    for plugin in queue.pm.get_plugins():
        if getattr(plugin, "__name__", None) == "jobcore_cron":
            return plugin  # type: ignore[no-any-return]
    return None


class ScheduleGauges:
    def __init__(self, queue_of: Callable[[], Queue | None]) -> None:
        self._queue_of = queue_of
        self._lock = threading.Lock()
        self._read: tuple[float, list[dict[str, Any]]] = (-FRESH, [])

    def register(self, meter: Meter) -> None:
        meter.create_observable_gauge(
            "jobcore.schedule.overdue",
            callbacks=[lambda options: self._observe("overdue", int)],
            unit="1",
            description="1 when a schedule's due run is past its grace and no scheduler ran it",
        )
        meter.create_observable_gauge(
            "jobcore.schedule.lag",
            callbacks=[lambda options: self._observe("lag_seconds", float)],
            unit="s",
            description="since a schedule's oldest run no scheduler has dealt with (0: none due)",
        )
        meter.create_observable_counter(
            "jobcore.schedule.runs",
            callbacks=[lambda options: self._observe("runs", int)],
            unit="{run}",
            description="runs each schedule enqueued (the store's record)",
        )

    def _rows(self) -> list[dict[str, Any]]:
        queue = self._queue_of()
        cron = cron_plugin(queue) if queue is not None else None
        if cron is None:
            return []
        with self._lock:
            at, rows = self._read
            if time.monotonic() - at >= FRESH:
                try:
                    rows = cron.schedule_gauges(queue)
                except Exception:
                    # raised once (the SDK logs it); the collection's other instruments
                    # report nothing rather than read (and wait for) the store again
                    self._read = (time.monotonic(), [])
                    raise
                self._read = (time.monotonic(), rows)
            return rows

    def _observe(self, field: str, kind: Callable[[Any], Any]) -> Iterable[Observation]:
        return [
            Observation(kind(row[field]), {"jobcore.schedule.name": row["name"]})
            for row in self._rows()
        ]


__all__ = ["ScheduleGauges", "cron_plugin"]
