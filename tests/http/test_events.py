"""Server-sent events: every transition from any process, in order, resumable by Last-Event-ID."""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from hubproc import Hub, Tokens, jobcore
from sse import Event, read_events, wait_open

from jobcore.storage.base import Storage

pytestmark = pytest.mark.skipif(
    not hasattr(Storage, "events_after"), reason="the store has no event log (storage v2)"
)


def test_an_enqueue_in_another_process_is_streamed(hub: Hub, tokens: Tokens) -> None:
    opened = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        reading = pool.submit(
            read_events, hub.url, tokens.read, 1, kinds=("job:enqueued",), opened=opened
        )
        wait_open(opened, reading)
        job_id = jobcore(hub.db, "enqueue", "noop", "{}", "--queue", "sse-1").stdout.strip()
        first, events = reading.result(30)
    assert first.startswith("retry: ")
    assert events[0].kind == "job:enqueued"
    assert events[0].data["id"] == job_id
    assert events[0].data["type"] == "noop"


def test_transitions_arrive_in_order_and_resume_without_loss(hub: Hub, tokens: Tokens) -> None:
    queue = f"sse-{uuid.uuid4().hex[:6]}"
    worker = f"sse-agent-{uuid.uuid4().hex[:6]}"
    with hub.client(tokens.admin) as admin:
        job = admin.post("/api/jobs", json={"type": "noop", "queue": queue}).json()["id"]
        lease = admin.post("/api/jobs/claim", json={"worker_id": worker, "queues": [queue]}).json()
        admin.post(
            f"/api/jobs/{job}/result", json={"worker_id": worker, "lease_id": lease["lease_id"]}
        )
        admin.post("/api/workers/register", json={"worker_id": worker})

    def registered(events: list[Event]) -> bool:
        return any(
            e.kind == "worker:registered" and e.data.get("worker_id") == worker for e in events
        )

    _, seen = read_events(hub.url, tokens.read, registered, last_event_id=0)
    ids = [e.id for e in seen]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert [e.kind for e in seen if e.data.get("id") == job] == [
        "job:enqueued",
        "job:claimed",
        "job:completed",
    ]
    # each event is the job as its transition left it
    assert [e.data["status"] for e in seen if e.data.get("id") == job] == [
        "pending",
        "claimed",
        "completed",
    ]
    # resume from the middle: exactly the rest
    middle = next(e.id for e in seen if e.data.get("id") == job and e.kind == "job:claimed")
    rest_count = len([e for e in seen if e.id > middle])
    _, rest = read_events(hub.url, tokens.read, rest_count, last_event_id=middle)
    assert [e.id for e in rest] == [e.id for e in seen if e.id > middle]


def test_a_dropped_stream_misses_nothing(hub: Hub, tokens: Tokens) -> None:
    queue = f"sse-{uuid.uuid4().hex[:6]}"
    stop = threading.Event()

    def produce() -> list[str]:
        made = []
        with hub.client(tokens.produce) as producer:
            while not stop.is_set() and len(made) < 200:
                answer = producer.post("/api/jobs", json={"type": "noop", "queue": queue})
                made.append(answer.json()["id"])
                time.sleep(0.01)
        return made

    def mine(events: list[Event]) -> list[str]:
        return [
            e.data["id"]
            for e in events
            if e.kind == "job:enqueued" and e.data.get("queue") == queue
        ]

    opened = threading.Event()
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(
            read_events, hub.url, tokens.read, lambda evs: len(mine(evs)) >= 5, opened=opened
        )
        wait_open(opened, first)  # the stream is open before the first enqueue
        producing = pool.submit(produce)
        _, batch = first.result(30)
        got = mine(batch)
        cursor = batch[-1].id
        for _ in range(3):  # drop, reconnect where we left off, read a few more
            _, batch = read_events(hub.url, tokens.read, 5, last_event_id=cursor)
            cursor = batch[-1].id
            got.extend(mine(batch))
        stop.set()
        made = producing.result(30)
    _, batch = (
        read_events(
            hub.url,
            tokens.read,
            lambda evs: len(got) + len(mine(evs)) >= len(made),
            last_event_id=cursor,
        )
        if len(got) < len(made)
        else ("", [])
    )
    got.extend(mine(batch))
    assert got == made


def test_bad_last_event_id_is_400(hub: Hub, tokens: Tokens) -> None:
    answer = httpx.get(
        hub.url + "/api/events",
        headers={"Authorization": f"Bearer {tokens.read}", "Last-Event-ID": "yesterday"},
    )
    assert answer.status_code == 400
    assert "Last-Event-ID" in answer.json()["error"]
