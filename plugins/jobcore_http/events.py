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

Memory is bounded by bytes, not only by events: an event holds its job's JSON, whose
payload may be up to the hub's body limit (and appears twice, as `payload` and the
fleet hub's `params`). The ring holds at most `RING_BYTES` of event text (and is
emptied when its last listener leaves), and one read from the store (`load`) at most
`BATCH_BYTES` (always at least one event); a stream sends a batch event by event.
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
BATCH_BYTES = 1024 * 1024  # the most event text one read from the store returns
RING_BYTES = 16 * 1024 * 1024  # the most event text the shared ring holds
_JOBS_AT_ONCE = 8  # jobs read from the store together while a batch is built


@dataclass(frozen=True, slots=True)
class SseEvent:
    seq: int
    kind: str
    data: str  # JSON text

    def encode(self) -> str:
        return f"id: {self.seq}\nevent: {self.kind}\ndata: {self.data}\n\n"

    @property
    def size(self) -> int:
        """About the bytes it holds and sends (its JSON text is ASCII)."""
        return len(self.data) + len(self.kind) + 48


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


class StreamSlot:
    """One open event stream of one caller; `ended` says it was replaced by a newer one."""

    __slots__ = ("connection", "ended")

    def __init__(self, connection: Any) -> None:
        self.connection = connection  # the guard's protocol (`guard.CONNECTION`), if any
        self.ended = False


class StreamSlots:
    """Each caller's open streams, oldest first (used on the event loop only).

    A caller (a token; a dashboard session or, without auth, a client address) keeps at
    most `limit` streams: opening one more ends its oldest, which resumes elsewhere with
    `Last-Event-ID`. Without the bound one read token took every connection of the hub."""

    def __init__(self) -> None:
        self._open: dict[str, list[StreamSlot]] = {}

    def open(self, caller: str, connection: Any, limit: int) -> tuple[StreamSlot, list[StreamSlot]]:
        """A new stream of `caller`; returns its slot and the slots it replaces."""
        slots = self._open.setdefault(caller, [])
        slot = StreamSlot(connection)
        slots.append(slot)
        replaced = slots[: max(0, len(slots) - limit)]
        del slots[: len(replaced)]
        for old in replaced:
            old.ended = True
        return slot, replaced

    def close(self, caller: str, slot: StreamSlot) -> None:
        slots = self._open.get(caller, [])
        if slot in slots:
            slots.remove(slot)
        if not slots:
            self._open.pop(caller, None)

    def count(self, caller: str) -> int:
        return len(self._open.get(caller, ()))


class EventFeed:
    def __init__(
        self,
        storage: Any,
        store: HubStore,
        *,
        ring: int = 10_000,
        ring_bytes: int = RING_BYTES,
        batch_bytes: int = BATCH_BYTES,
    ) -> None:
        self.storage = storage
        self.store = store
        self.supported = callable(getattr(storage, "events_after", None))
        self.latest = 0
        self._base = 0  # the event the ring starts after
        self.signal = AsyncSignal()
        self._ring: deque[SseEvent] = deque()
        self._ring_max = ring
        self.ring_bytes = ring_bytes
        self.batch_bytes = batch_bytes
        self.held = 0  # bytes of the events in the ring
        self._epoch = 0  # counts resets: a read begun before one is dropped
        self._lock = threading.Lock()
        self._listeners = 0
        self.slots = StreamSlots()

    # -- listeners -------------------------------------------------------------------

    def join(self) -> int:
        """A stream starts listening; returns the newest seq (where a fresh stream starts)."""
        newest = int(self.storage.last_event_seq()) if self.supported else 0
        with self._lock:
            if self._listeners == 0 and self.supported:
                self._reset()
                self.latest = self._base = newest
            self._listeners += 1
            return self.latest

    def leave(self) -> None:
        with self._lock:
            self._listeners = max(0, self._listeners - 1)
            if self._listeners == 0:
                self._reset()  # nobody reads the ring: do not keep its events

    def _reset(self) -> None:
        self._ring.clear()
        self.held = 0
        self._epoch += 1

    # -- the reader --------------------------------------------------------------------

    def changed(self) -> None:
        """Called on every store change (waiter thread): pull new events if anyone listens."""
        if not self.supported or self._listeners == 0:
            return
        pulled = False
        while True:
            cursor, epoch = self.latest, self._epoch
            try:
                batch, more = self._read(cursor, 1000)  # outside the lock: streams read the ring
            except Exception as exc:
                log.warning("reading events failed: %s", exc)
                break
            if not batch:
                break
            with self._lock:
                if self.latest != cursor or self._epoch != epoch:  # reset meanwhile
                    break
                for event in batch:
                    self._ring.append(event)
                    self.held += event.size
                    while len(self._ring) > 1 and (
                        len(self._ring) > self._ring_max or self.held > self.ring_bytes
                    ):
                        dropped = self._ring.popleft()  # a stream behind it reads the store
                        self.held -= dropped.size
                        self._base = dropped.seq
                self.latest = batch[-1].seq
            pulled = True
            if not more:
                break
        if pulled:
            self.signal.fire()

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
        """Events after `cursor` read from the store, each with its job's (or worker's) JSON:
        at most `limit` events and, past the first, at most `batch_bytes` of text."""
        return self._read(cursor, limit)[0]

    def _read(self, cursor: int, limit: int) -> tuple[list[SseEvent], bool]:
        """`load`, and whether more events may follow the ones returned."""
        if not self.supported:
            return [], False
        rows = self.storage.events_after(cursor, limit)
        out: list[SseEvent] = []
        size = 0
        for start in range(0, len(rows), _JOBS_AT_ONCE):  # a few jobs in memory at a time
            group = rows[start : start + _JOBS_AT_ONCE]
            jobs = self.store.jobs_by_id(list({row.job_id for row in group if row.job_id}))
            for row in group:
                data: dict[str, Any]
                if row.job_id and row.job_id in jobs:  # the job as this transition left it
                    data = job_json(job_at(jobs[row.job_id], row.kind, row.at, row.data))
                elif row.job_id:  # deleted since: what the event stored
                    data = {"id": row.job_id, **_flat(row.data)}
                else:
                    data = {"worker_id": row.worker_id, **(row.data or {})}
                event = SseEvent(row.seq, row.kind, json.dumps(data, default=str))
                if out and size + event.size > self.batch_bytes:
                    return out, True  # the rest in the next read, after this batch was sent
                out.append(event)
                size += event.size
        return out, len(rows) >= limit
