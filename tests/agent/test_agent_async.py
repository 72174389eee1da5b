"""`async def` handlers on a remote agent (DESIGN §15): the hub's outcome and cancellation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hubenv import Agent, Hub, wait_until

PLUGINS = {"JOBCORE_PLUGINS": "jobcore_test_plugin,agent_test_plugin,jobcore_async_plugin"}


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[Hub]:
    hub = Hub(tmp_path, lease="5s", env_extra=PLUGINS)
    yield hub
    hub.close()


def test_async_handlers_run_and_are_cancelled_at_their_timeout_on_an_agent(
    hub: Hub, tmp_path: Path
) -> None:
    notes = tmp_path / "notes"
    agent = Agent(hub, "a1", env_extra={**PLUGINS, "JOBCORE_STOP_GRACE": "2"})
    try:
        done = hub.enqueue("async_job", {"log": str(notes), "sleep": 0.2})
        late = hub.enqueue(
            "async_job", {"log": str(notes), "sleep": 600}, timeout=1, max_attempts=1
        )
        stubborn = hub.enqueue(
            "async_job",
            {"log": str(notes), "sleep": 600, "how": "ignore_cancel"},
            timeout=1,
            max_attempts=1,
        )
        assert hub.wait_status(done["id"], "completed")["result"] == {"attempt": 1, "async": True}
        failed = hub.wait_status(late["id"], "failed")
        assert failed["last_error"].startswith("max_runtime_exceeded")
        hub.wait_status(stubborn["id"], "failed")
        lines = [line.split() for line in notes.read_text().splitlines()]
        cancelled = {line[1]: line[4:] for line in lines if line[0] == "cancelled"}
        assert cancelled[late["id"]] == ["timeout", "True"]
        assert cancelled[stubborn["id"]] == ["timeout", "True"]
        # past its grace the stubborn task was cancelled a second time, and the agent went on
        wait_until(lambda: "cancelled-again " + stubborn["id"] in notes.read_text())
        after = hub.enqueue("async_job", {"log": str(notes)})
        hub.wait_status(after["id"], "completed")
    finally:
        agent.kill()
