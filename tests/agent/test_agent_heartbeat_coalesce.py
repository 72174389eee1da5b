"""On an agent too, `ctx.heartbeat()` requests coalesce: one beat per lease/20 at most.

Before, every call was a heartbeat report to the hub of its own (a handler heartbeating
once per item sent the hub one request per item).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from faultproxy import FaultProxy
from hubenv import Agent, Hub

pytest.importorskip("fastapi")

pytestmark = pytest.mark.timeout(120)


def test_a_handler_heartbeating_per_item_sends_one_beat_per_lease_20th(tmp_path: Path) -> None:
    hub = Hub(tmp_path, lease="20s")  # beats every 5s; requests coalesce over 1s
    proxy = FaultProxy(hub.url)
    agent = Agent(hub, "a1", hub_url=proxy.url)
    try:
        job = hub.enqueue("beats", {"seconds": 2.5, "every": 0.001})
        done = hub.wait_status(job["id"], "completed", "failed")
        assert done["status"] == "completed" and done["result"] > 1000
        # at once, then about 1s and 2s later; before, one per call
        assert 1 <= proxy.items["heartbeat"] <= 5, proxy.items
    finally:
        agent.kill()
        proxy.close()
        hub.close()
