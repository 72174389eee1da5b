"""`EventFeed`'s ring when the store's delivery order is not seq order (PostgreSQL)."""

from __future__ import annotations

from typing import Any

from jobcore_http.events import EventFeed

from jobcore.models import Event


class OrderedStore:
    """Events in a fixed delivery order whose seqs do not grow monotonically."""

    def __init__(self, seqs: list[int]) -> None:
        self.delivered = 0
        self.events = [Event(seq=s, at=0, kind="worker:lost", worker_id=f"w{s}") for s in seqs]

    def last_event_seq(self) -> int:
        return self.events[self.delivered - 1].seq if self.delivered else 0

    def events_after(self, seq: int, limit: int = 1000) -> list[Event]:
        visible = self.events[: self.delivered]
        at = next((i + 1 for i, e in enumerate(visible) if e.seq == seq), 0)
        return visible[at : at + limit]


class NoJobs:
    def jobs_by_id(self, ids: list[str]) -> dict[str, Any]:
        return {}


def seqs(events: list[Any] | None) -> list[int] | None:
    return None if events is None else [e.seq for e in events]


def test_cursors_are_found_by_identity_and_the_ring_base_follows_evictions() -> None:
    store = OrderedStore([5, 3, 4, 9, 7, 8])
    store.delivered = 1
    feed = EventFeed(store, NoJobs(), ring=3)  # type: ignore[arg-type]
    assert feed.join() == 5
    store.delivered = 4
    feed.changed()
    assert seqs(feed.recent(5)) == [3, 4, 9]  # the ring's base: everything
    assert seqs(feed.recent(3)) == [4, 9]  # 3 < 5, yet after it
    assert seqs(feed.recent(9)) == []
    store.delivered = 6
    feed.changed()  # 3 and 4 leave: the ring holds 9, 7, 8, after 4
    assert seqs(feed.recent(4)) == [9, 7, 8]
    assert seqs(feed.recent(9)) == [7, 8]
    assert feed.recent(3) is None  # no longer held: the stream reads the store
    assert seqs(feed.load(3, 10)) == [4, 9, 7, 8]
