"""Event cursors past 64 bits are a 400 before the stream starts, on a real hub.

Before the fix `Last-Event-ID: 9223372036854775808` (or `?since=` as large) answered
200, then the stream was cut with a traceback in the hub's log (the store cannot
compare an integer that large).
"""

from __future__ import annotations

from hubproc import Hub, Tokens

TOO_LARGE = (2**63, 2**64, 10**30)


def test_cursors_past_64_bits_are_400(hub: Hub, tokens: Tokens) -> None:
    with hub.client(tokens.read) as reader:
        for value in TOO_LARGE:
            answer = reader.get("/api/events", headers={"Last-Event-ID": str(value)})
            assert answer.status_code == 400, (value, answer.text)
            assert "Last-Event-ID" in answer.json()["error"]
            answer = reader.get("/api/jobs/events", params={"since": value})
            assert answer.status_code == 400, (value, answer.text)
            assert "since" in answer.json()["error"]
        with reader.stream(
            "GET", "/api/events", headers={"Last-Event-ID": str(2**63 - 1)}
        ) as stream:
            assert stream.status_code == 200
            first = next(stream.iter_lines())
            assert first.startswith("retry:"), first
    assert "Traceback" not in hub.output()
