"""Outcomes holding a lone surrogate (not encodable as UTF-8) still reach the hub."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hubenv import Agent, Hub, wait_until
from jobcore_agent.wire import sendable
from test_agent_e2e import upload

from conftest import solver_source

pytest.importorskip("fastapi")

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[Hub]:
    # a lease longer than the hub's restart under load: a lease that ran out while the hub
    # was down would rightly be swept and the job run again (at least once, DESIGN §6)
    hub = Hub(tmp_path, lease="60s")
    yield hub
    hub.close()


def test_a_result_with_a_lone_surrogate_completes_and_the_agent_keeps_delivering(
    hub: Hub, tmp_path: Path
) -> None:
    # valid JSON on stdout whose string decodes to a lone surrogate: Python cannot send it
    poison = upload(hub, solver_source("print(json.dumps({'name': 'a\\udc80b'}))"), tmp_path)
    slow = upload(hub, solver_source("time.sleep(2); print(json.dumps({'ok': True}))"), tmp_path)
    agent = Agent(hub, "a1", extra=("--concurrency", "1"))
    try:
        bad = hub.enqueue("exec", {"sha256": poison}, max_attempts=1)
        done = hub.wait_status(bad["id"], "completed", "failed", timeout=30)
        assert done["status"] == "completed", done
        assert "lone surrogate" in done["result"]["unserialisable"]
        assert "udc80" in done["result"]["repr"]
        # the next outcome finds the hub down: the reporter thread (still alive) delivers it
        good = hub.enqueue("exec", {"sha256": slow})
        hub.wait_status(good["id"], "claimed")
        # the agent downloads the executable from the hub first: a hub stopped before that
        # fails the attempt (DownloadFailed, retried), which is not what this test is about
        wait_until(lambda: f"cached {slow[:12]}" in agent.log())
        hub.stop()
        wait_until(lambda: "not delivered yet" in agent.log())
        hub.start()
        done = hub.wait_status(good["id"], "completed", timeout=30)
        assert done["result"] == {"ok": True} and done["attempts"] == 1, done
        assert "Traceback" not in agent.log()
    finally:
        agent.kill()


def test_report_bodies_are_made_sendable() -> None:
    fail = {"worker_id": "w", "reason": "no such file 'x\udcff.txt'", "retryable": True}
    assert sendable("fail", fail)["reason"] == "no such file 'x\\udcff.txt'"
    ok = {"worker_id": "w", "result": {"é": [1, "ü"]}}
    assert sendable("result", ok) is ok
    bad = sendable("result", {"worker_id": "w", "result": {"\ud800": 1}})
    assert bad["worker_id"] == "w"
    assert bad["result"]["unserialisable"].startswith("the result holds a lone surrogate")
    assert bad["result"]["repr"] == "{'\\ud800': 1}"
