"""Server-sent events from the store's event log, shared by every stream of this process.

One reader (on the change waiter's thread) pulls new rows of the store's
`events` table once per change, while anyone listens, into a ring of recent
events; each stream serves from the ring, and reads the store itself only
when it resumes from further back (`Last-Event-ID`).

A cursor is the seq of the last event a stream got, and the store's delivery
order need not be seq order (PostgreSQL delivers an event whose transaction
committed late after events with greater seqs), so the ring finds a cursor by
identity, never by comparing seqs. PostgreSQL also holds an event back while
an older transaction runs; when that transaction wrote no events its end
notifies nobody, so the waiter also calls `changed` every `REREAD` seconds.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

from jobcore.event_snapshot import SNAPSHOT_KEY, job_at
from jobcore.timeutil import iso
from jobcore_http.signal import AsyncSignal
from jobcore_http.store import HubStore
from jobcore_http.views import job_json

log = logging.getLogger("jobcore.http.events")

REREAD = 1.0  # seconds: how often the feed reads again with no change seen


@dataclass(frozen=True, slots=True)
class SseEvent:
    seq: int
    kind: str
    data: str  # JSON text

    def encode(self) -> str:
        return f"id: {self.seq}\nevent: {self.kind}\ndata: {self.data}\n\n"


def _flat(data: dict[str, Any] | None) -> dict[str, Any]:
    """An event's stored data with its job snapshot's fields at the top (times in ISO)."""
    out = {k: v for k, v in (data or {}).items() if k != SNAPSHOT_KEY}
    snapshot = (data or {}).get(SNAPSHOT_KEY)
    if isinstance(snapshot, dict):
        for name, value in snapshot.items():
            timed = name == "run_at" or name.endswith("_at")
            out[name] = iso(value) if timed and isinstance(value, int) else value
        out["worker_id"] = out.get("locked_by")
    return out


class EventFeed:
    def __init__(self, storage: Any, store: HubStore, *, ring: int = 10_000) -> None:
        self.storage = storage
        self.store = store
        self.supported = callable(getattr(storage, "events_after", None))
        self.latest = 0
        self._base = 0  # the event the ring starts after
        self.signal = AsyncSignal()
        self._ring: deque[SseEvent] = deque(maxlen=ring)
        self._lock = threading.Lock()
        self._listeners = 0

    # -- listeners -------------------------------------------------------------------

    def join(self) -> int:
        """A stream starts listening; returns the newest seq (where a fresh stream starts)."""
        newest = int(self.storage.last_event_seq()) if self.supported else 0
        with self._lock:
            if self._listeners == 0 and self.supported:
                self._ring.clear()
                self.latest = self._base = newest
            self._listeners += 1
            return self.latest

    def leave(self) -> None:
        with self._lock:
            self._listeners = max(0, self._listeners - 1)

    # -- the reader --------------------------------------------------------------------

    def changed(self) -> None:
        """Called on every store change (waiter thread): pull new events if anyone listens."""
        if not self.supported or self._listeners == 0:
            return
        pulled = False
        while True:
            cursor = self.latest
            try:
                batch = self.load(cursor, 1000)  # outside the lock: streams keep reading the ring
            except Exception as exc:
                log.warning("reading events failed: %s", exc)
                break
            if not batch:
                break
            with self._lock:
                if self.latest != cursor:  # a first listener reset the feed meanwhile
                    break
                self._rebase(len(self._ring) + len(batch) - (self._ring.maxlen or 0), batch)
                self._ring.extend(batch)
                self.latest = batch[-1].seq
            pulled = True
            if len(batch) < 1000:
                break
        if pulled:
            self.signal.fire()

    def _rebase(self, dropped: int, batch: list[SseEvent]) -> None:
        """The ring is about to drop its `dropped` oldest (of itself, then `batch`)."""
        if dropped > 0:
            kept = len(self._ring)
            self._base = (
                self._ring[dropped - 1].seq if dropped <= kept else batch[dropped - kept - 1].seq
            )

    def recent(self, cursor: int) -> list[SseEvent] | None:
        """Events after `cursor` from the ring; None when the ring does not hold that event."""
        with self._lock:
            if cursor == self.latest:
                return []
            if cursor == self._base:
                return list(self._ring)
            newer: list[SseEvent] = []
            for event in reversed(self._ring):  # only the new ones are looked at
                if event.seq == cursor:
                    newer.reverse()
                    return newer
                newer.append(event)
            return None

    def load(self, cursor: int, limit: int) -> list[SseEvent]:
        """Events after `cursor` read from the store, each with its job's (or worker's) JSON."""
        if not self.supported:
            return []
        rows = self.storage.events_after(cursor, limit)
        jobs = self.store.jobs_by_id([row.job_id for row in rows if row.job_id])
        out = []
        for row in rows:
            data: dict[str, Any]
            if row.job_id and row.job_id in jobs:  # the job as this event's transition left it
                data = job_json(job_at(jobs[row.job_id], row.kind, row.at, row.data))
            elif row.job_id:  # deleted since: what the event stored
                data = {"id": row.job_id, **_flat(row.data)}
            else:
                data = {"worker_id": row.worker_id, **(row.data or {})}
            out.append(SseEvent(row.seq, row.kind, json.dumps(data, default=str)))
        return out
