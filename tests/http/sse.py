"""Reading server-sent events in tests."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass
class Event:
    id: int
    kind: str
    data: Any


def read_events(
    url: str,
    token: str,
    count: int | Callable[[list[Event]], bool],
    *,
    last_event_id: int | None = None,
    kinds: tuple[str, ...] = (),
    opened: threading.Event | None = None,
) -> tuple[str, list[Event]]:
    """Open the stream and collect events (of `kinds`, if given) until there are `count`
    (or `count(events)` is true); returns (the stream's first line, the events).

    `opened` is set at the stream's first line: from then on no new event is missed."""
    done = count if callable(count) else (lambda events: len(events) >= count)
    headers = {"Authorization": f"Bearer {token}"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    events: list[Event] = []
    first = ""
    fields: dict[str, str] = {}
    with httpx.stream("GET", url + "/api/events", headers=headers, timeout=20) as answer:
        assert answer.status_code == 200, answer.read()
        assert answer.headers["content-type"].startswith("text/event-stream")
        for line in answer.iter_lines():
            if not first:
                first = line
                if opened is not None:
                    opened.set()
            if line == "":
                if "id" in fields and (not kinds or fields.get("event") in kinds):
                    events.append(
                        Event(int(fields["id"]), fields["event"], json.loads(fields["data"]))
                    )
                    if done(events):
                        break
                fields = {}
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            fields[name] = value[1:] if value.startswith(" ") else value
    return first, events


def wait_open(opened: threading.Event, reading: Future[Any], timeout: float = 30.0) -> None:
    """Wait until the stream read by `reading` is open; its own error if it failed first."""
    deadline = time.monotonic() + timeout
    while not opened.wait(0.05):
        if reading.done():
            reading.result()  # raises what went wrong
            raise AssertionError("the event stream ended before its first line")
        if time.monotonic() > deadline:
            raise AssertionError(f"the event stream did not open within {timeout} s")
