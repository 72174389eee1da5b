"""The workers registry: agents' capabilities, when each was last heard from, their state.

Last-seen times are kept in memory per request and written to the store in
batches (every `flush`), so an agent's heartbeat costs no extra commit.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from jobcore.timeutil import iso
from jobcore_http.models import MAX_PROGRESS_DEPTH, json_depth
from jobcore_http.store import HubStore, WorkerRecord

log = logging.getLogger("jobcore.http.workers")


def add_event(storage: Any, kind: str, worker_id: str, data: dict[str, Any]) -> None:
    """Append a worker event to the store's log (a store without one records nothing)."""
    method = getattr(storage, "add_event", None)
    if callable(method):
        try:
            method(kind, worker_id=worker_id, data=data)
        except Exception as exc:
            log.warning("recording %s for %s failed: %s", kind, worker_id, exc)


class Registry:
    def __init__(self, store: HubStore, storage: Any, *, lease_ms: int) -> None:
        self.store = store
        self.storage = storage
        self.lease_ms = lease_ms
        self._lock = threading.Lock()
        self._flushing = threading.Lock()  # one flush at a time: see `flush`
        self._dirty: dict[str, int] = {}
        self._known: set[str] = set()
        self.draining: set[str] = set()
        self.progress: dict[str, Any] = {}  # job id -> the agent's last reported progress

    def load(self) -> None:
        records = self.store.list_workers()
        self._known = {record.worker_id for record in records}
        self.draining = {record.worker_id for record in records if record.drain}

    def drain(self, worker_id: str) -> bool:
        """Ask `worker_id` to stop claiming and exit once its jobs are done; False if unknown."""
        self.flush()
        if not self.store.set_drain(worker_id, True):
            return False
        self.draining.add(worker_id)
        return True

    def known(self, worker_id: str) -> bool:
        return worker_id in self._known

    def ids(self) -> set[str]:
        return set(self._known)

    def seen(self, worker_id: str, now: int) -> None:
        with self._lock:
            self._dirty[worker_id] = now
            self._known.add(worker_id)

    def register(self, record: WorkerRecord) -> None:
        created = self.store.upsert_worker(record)
        with self._lock:
            self._known.add(record.worker_id)
            self._dirty.pop(record.worker_id, None)
            self.draining.discard(record.worker_id)
        data = worker_data(record)
        data["new"] = created
        add_event(self.storage, "worker:registered", record.worker_id, data)

    def claim_ended(self, job_id: str) -> None:
        """A claim ended: its last progress is of no use any more."""
        self.progress.pop(job_id, None)

    def forget_progress(self, live: set[str]) -> None:
        """Drop progress of jobs no longer claimed."""
        for job_id in [i for i in self.progress if i not in live]:
            self.progress.pop(job_id, None)

    def flush(self) -> None:
        """Write the last-seen times kept in memory. Once it returns, every agent seen
        before the call is in the store: a flush that another thread began first is
        waited for (it had taken those times; listing before its write ended missed
        them). Times a failed write had taken are kept for the next flush."""
        with self._flushing:
            with self._lock:
                dirty, self._dirty = self._dirty, {}
            if not dirty:
                return
            try:
                self.store.touch_workers(dirty)
            except BaseException:
                with self._lock:
                    for worker_id, at in dirty.items():
                        self._dirty[worker_id] = max(at, self._dirty.get(worker_id, 0))
                raise

    def sweep_lost(self, now: int) -> list[str]:
        """Mark agents silent for longer than a lease lost; one `worker:lost` event each."""
        self.flush()
        lost = self.store.mark_lost(now - self.lease_ms, now)
        for worker_id in lost:
            add_event(self.storage, "worker:lost", worker_id, {"state": "lost"})
        return lost

    def listing(self, now: int, claimed_by: dict[str, list[str]]) -> list[dict[str, Any]]:
        with self._lock:
            recent = dict(self._dirty)
        out = []
        for record in self.store.list_workers():
            last_seen = max(record.last_seen, recent.get(record.worker_id, 0))
            current = claimed_by.get(record.worker_id, [])
            lost = last_seen < now - self.lease_ms
            state = "lost" if lost else "active" if current else "idle"
            out.append(
                {
                    **worker_data(record),
                    "last_seen": iso(last_seen),
                    "state": state,
                    "current_jobs": current,
                    "progress": {
                        i: self.progress[i]
                        for i in current
                        if i in self.progress and _shown(self.progress[i])
                    },
                    "draining": record.drain,
                }
            )
        return out


def _shown(progress: Any) -> bool:
    """Whether a progress can be answered: one too deep for the answer's encoder is left
    out, never a 500 for every reader (routes check progress on input too)."""
    return json_depth(progress, MAX_PROGRESS_DEPTH)


def worker_data(record: WorkerRecord) -> dict[str, Any]:
    return {
        "worker_id": record.worker_id,
        "name": record.name,
        "cores": record.cores,
        "ram_gb": record.ram_gb,
        "tags": record.tags,
        "types": record.types,
        "registered_at": iso(record.registered_at or None),
        "last_seen": iso(record.last_seen or None),
    }
