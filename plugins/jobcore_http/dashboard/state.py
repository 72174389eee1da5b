"""The dashboard's per-app state: its reader and caches, made on first use from `app.state.queue`."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from jobcore_dlq import summarize
from starlette.requests import Request

from jobcore.models import JobStatus
from jobcore.queue import Queue
from jobcore.timeutil import now_ms
from jobcore_http.dashboard.overview import ChangeCache, Snapshot, take
from jobcore_http.dashboard.reader import Reader

_lock = threading.Lock()


@dataclass(slots=True)
class Dashboard:
    queue: Queue
    reader: Reader
    overview: ChangeCache[Snapshot]
    dead_letters: ChangeCache[list[dict[str, Any]]]

    def close(self) -> None:
        self.overview.close()
        self.dead_letters.close()
        self.reader.close()


def make_dashboard(queue: Queue) -> Dashboard:
    reader = Reader(queue)

    def failed_groups() -> list[dict[str, Any]]:
        return summarize(list(queue.storage.scan(statuses=[JobStatus.FAILED.value])))

    return Dashboard(
        queue=queue,
        reader=reader,
        overview=ChangeCache(reader.path, lambda: take(reader, now_ms()), "dashboard-counts"),
        dead_letters=ChangeCache(reader.path, failed_groups, "dashboard-dead-letters"),
    )


def dashboard(request: Request) -> Dashboard:
    """The app's dashboard state (made once, from the hub's `app.state.queue`)."""
    state = request.app.state
    found: Dashboard | None = getattr(state, "dashboard", None)
    if found is None:
        with _lock:
            found = getattr(state, "dashboard", None)
            if found is None:
                queue: Queue | None = getattr(state, "queue", None)
                if queue is None:
                    raise RuntimeError("the dashboard needs app.state.queue (a jobcore Queue)")
                found = make_dashboard(queue)
                found.overview.warm()
                state.dashboard = found
    return found
