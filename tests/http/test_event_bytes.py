"""Event streams hold a bounded number of bytes, not a bounded number of events: a stream
resuming from far back sends its backlog in pieces as the client takes them (never the
whole of a read from the store as one write), one read from the store is bounded in bytes,
and the shared ring is bounded in bytes and emptied when its last listener leaves."""

from __future__ import annotations

import json
import socket
import uuid
from typing import Any

import pytest
from hubproc import Hub, Tokens
from jobcore_http.events import EventFeed

from jobcore.models import Event
from jobcore.storage.base import Storage

pytestmark = pytest.mark.skipif(
    not hasattr(Storage, "events_after"), reason="the store has no event log (storage v2)"
)

BLOB = 300_000  # characters of payload per job: each event carries it as payload and params


def _chunks(sock: socket.socket, want: int) -> tuple[list[int], list[tuple[int, str, int]]]:
    """Read a chunked event stream until `want` events: (chunk sizes, (id, kind, data size))."""
    buffer = b""

    def fill() -> None:
        nonlocal buffer
        data = sock.recv(1 << 16)
        assert data, "the hub closed the stream"
        buffer += data

    while b"\r\n\r\n" not in buffer:
        fill()
    head, buffer = buffer.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200"), head
    assert b"transfer-encoding: chunked" in head.lower()
    sizes: list[int] = []
    text = ""
    events: list[tuple[int, str, int]] = []
    while len(events) < want:
        while b"\r\n" not in buffer:
            fill()
        line, buffer = buffer.split(b"\r\n", 1)
        size = int(line, 16)
        while len(buffer) < size + 2:
            fill()
        chunk, buffer = buffer[:size], buffer[size + 2 :]
        sizes.append(size)
        text += chunk.decode()
        while "\n\n" in text:
            block, text = text.split("\n\n", 1)
            fields = dict(
                line.split(": ", 1) for line in block.split("\n") if ": " in line and line[0] != ":"
            )
            if "id" in fields:
                events.append((int(fields["id"]), fields["event"], len(fields["data"])))
    return sizes, events


def test_a_resuming_stream_sends_its_backlog_in_pieces_not_one_string(
    hub: Hub, tokens: Tokens
) -> None:
    queue = f"big-{uuid.uuid4().hex[:6]}"
    with hub.client(tokens.produce) as api:
        for _ in range(12):
            answer = api.post(
                "/api/jobs", json={"type": "record", "queue": queue, "payload": {"log": "x" * BLOB}}
            )
            assert answer.status_code == 201, answer.text
    with socket.create_connection(("127.0.0.1", hub.port), timeout=30) as sock:
        sock.sendall(
            f"GET /api/events HTTP/1.1\r\nHost: x\r\nLast-Event-ID: 0\r\n"
            f"Authorization: Bearer {tokens.read}\r\n\r\n".encode()
        )
        sizes, events = _chunks(sock, 12)
    big = [e for e in events if e[2] > BLOB]
    assert len(big) >= 12  # every job's event, each with its payload (twice)
    ids = [e[0] for e in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    # before: the whole read from the store (here every event, ~7 MB) was one write
    assert max(sizes) < 2 * BLOB + 64 * 1024, sizes


# -- the feed's bounds, on a store of large events ------------------------------------------


class BigEvents:
    """Worker events of about `size` bytes each, `delivered` of them visible."""

    def __init__(self, count: int, size: int) -> None:
        self.delivered = 0
        self.events = [
            Event(seq=s, at=0, kind="worker:lost", worker_id=f"w{s}", data={"pad": "x" * size})
            for s in range(1, count + 1)
        ]
        self.asked: list[int] = []

    def last_event_seq(self) -> int:
        return self.delivered

    def events_after(self, seq: int, limit: int = 1000) -> list[Event]:
        self.asked.append(limit)
        return self.events[seq : min(seq + limit, self.delivered)]


class NoJobs:
    def jobs_by_id(self, ids: list[str]) -> dict[str, Any]:
        return {}


def test_one_read_from_the_store_is_bounded_in_bytes() -> None:
    store = BigEvents(50, 100_000)
    store.delivered = 50
    feed = EventFeed(store, NoJobs(), batch_bytes=350_000)  # type: ignore[arg-type]
    batch = feed.load(0, 1000)
    assert [e.seq for e in batch] == [1, 2, 3]
    assert sum(e.size for e in batch) <= 350_000
    assert [e.seq for e in feed.load(3, 1000)] == [4, 5, 6]
    # an event larger than the bound still comes, alone
    assert [e.seq for e in EventFeed(store, NoJobs(), batch_bytes=10).load(7, 1000)] == [8]  # type: ignore[arg-type]


def test_the_ring_is_bounded_in_bytes_and_emptied_when_its_last_listener_leaves() -> None:
    store = BigEvents(40, 100_000)
    feed = EventFeed(store, NoJobs(), ring_bytes=1_000_000, batch_bytes=250_000)  # type: ignore[arg-type]
    assert feed.join() == 0
    store.delivered = 40
    feed.changed()
    assert feed.latest == 40  # every batch was pulled, though each is cut by bytes
    assert feed.held <= 1_000_000
    held = feed.recent(feed.latest - 9)
    assert held is not None and [e.seq for e in held] == list(range(32, 41))
    assert feed.recent(5) is None  # dropped: a stream that far back reads the store
    oldest = feed.recent(feed._base)
    assert oldest is not None and sum(e.size for e in oldest) == feed.held
    assert json.loads(oldest[-1].data)["worker_id"] == "w40"
    second = feed.join()
    feed.leave()
    assert feed.held > 0  # one listener still reads it
    feed.leave()
    assert feed.held == 0 and feed.recent(second) in ([], None)
