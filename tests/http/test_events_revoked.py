"""An event stream outlives its auth check: a token revoked while it streamed went on
receiving every job's payload until the client hung up. Now the stream ends at the next
batch after the revocation, and reconnecting answers 401."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from hubproc import Hub, Tokens
from sse import Event, read_events, wait_open

from jobcore.storage.base import Storage

pytestmark = pytest.mark.skipif(
    not hasattr(Storage, "events_after"), reason="the store has no event log (storage v2)"
)


def _secret(events: list[Event]) -> bool:
    return any("revoked-secret" in str(event.data) for event in events)


@pytest.mark.parametrize("scope", ["read", "produce"])
def test_a_token_revoked_while_streaming_sees_no_later_event(
    hub: Hub, tokens: Tokens, scope: str
) -> None:
    name = f"sse-revoked-{scope}"
    limits = {"types": ["noop"], "queues": ["partner"]} if scope == "produce" else {}
    with hub.client(tokens.admin) as admin:
        made = admin.post("/api/tokens", json={"name": name, "scope": scope, **limits})
        assert made.status_code == 201, made.text
        token = made.json()["token"]
        opened = threading.Event()
        with ThreadPoolExecutor(1) as pool:
            reading = pool.submit(read_events, hub.url, token, _secret, opened=opened)
            wait_open(opened, reading)
            assert admin.delete(f"/api/tokens/{name}").status_code == 204
            job = admin.post(
                "/api/jobs",
                json={"type": "record", "payload": {"log": "revoked-secret"}, "delay": 3600},
            )
            assert job.status_code == 201, job.text
            _, events = reading.result(30)  # returns when the stream ends
        assert not _secret(events), events
        assert admin.delete(f"/api/jobs/{job.json()['id']}").status_code == 204
    again = httpx.get(
        hub.url + "/api/events", headers={"Authorization": f"Bearer {token}"}, timeout=10
    )
    assert again.status_code == 401, again.text
