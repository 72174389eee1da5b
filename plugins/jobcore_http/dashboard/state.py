"""The dashboard's per-app state: its reader and caches, made on first use from `app.state.queue`."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from jobcore_dlq import summarize
from starlette.requests import Request

from jobcore.models import JobStatus
from jobcore.queue import Queue
from jobcore_http.dashboard.overview import ChangeCache, Counts, History, count, history
from jobcore_http.dashboard.reader import Reader
from jobcore_http.store import HubStore, hub_store_for

_lock = threading.Lock()


@dataclass(slots=True)
class Dashboard:
    queue: Queue
    store: HubStore  # the hub's: its `search_jobs` serves the jobs list
    reader: Reader
    counts: ChangeCache[Counts]
    history: ChangeCache[History]
    dead_letters: ChangeCache[list[dict[str, Any]]]

    def now(self) -> int:
        """The store's clock (PostgreSQL's, not this process's: leases are set by it)."""
        return self.queue.storage.now()

    def close(self) -> None:
        self.reader.close()


def make_dashboard(queue: Queue, store: HubStore | None = None) -> Dashboard:
    store = store if store is not None else hub_store_for(queue.storage)
    reader = Reader(queue, store)
    token = reader.sql.change_token

    def failed_groups() -> list[dict[str, Any]]:
        return summarize(list(queue.storage.scan(statuses=[JobStatus.FAILED.value])))

    return Dashboard(
        queue=queue,
        store=store,
        reader=reader,
        counts=ChangeCache(token, lambda: count(reader), "dashboard-counts"),
        history=ChangeCache(
            token, lambda: history(reader, queue.storage.now()), "dashboard-history", factor=30
        ),
        dead_letters=ChangeCache(token, failed_groups, "dashboard-dead-letters", factor=30),
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
                hub = getattr(state, "hub", None)
                found = make_dashboard(queue, getattr(hub, "store", None))
                found.history.peek()  # starts the first whole-table count in the background
                state.dashboard = found
    return found
