"""otel on a remote agent: the process span of an `async def` handler covers the awaited
handler, exported over OTLP/HTTP by a real `jobcore agent` (DESIGN §15)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hubenv import Agent, Hub, wait_until
from otlp_receiver import OtlpReceiver

pytest.importorskip("opentelemetry.sdk")

PLUGINS = {"JOBCORE_PLUGINS": "jobcore_test_plugin,agent_test_plugin,jobcore_async_plugin"}
ERROR = 2  # STATUS_CODE_ERROR in OTLP


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[Hub]:
    hub = Hub(tmp_path, lease="5s", env_extra=PLUGINS)
    yield hub
    hub.close()


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    server = OtlpReceiver()
    yield server
    server.close()


def test_an_agents_async_handler_span_covers_the_awaited_handler(
    hub: Hub, receiver: OtlpReceiver, tmp_path: Path
) -> None:
    notes = str(tmp_path / "notes")
    slow = hub.enqueue("async_job", {"log": notes, "sleep": 0.2})
    failing = hub.enqueue("async_job", {"log": notes, "sleep": 0.2, "how": "error"}, max_attempts=1)
    agent = Agent(
        hub,
        "a1",
        env_extra={
            **PLUGINS,
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        },
    )
    try:
        hub.wait_status(slow["id"], "completed")
        hub.wait_status(failing["id"], "failed")

        def process_spans() -> dict[str, dict[str, object]] | None:
            found = {
                span["attributes"]["messaging.message.id"]: span
                for span in list(receiver.spans)
                if span["name"].startswith("process ")
            }
            return found if len(found) == 2 else None

        spans = wait_until(process_spans)
        assert spans[slow["id"]]["seconds"] >= 0.2
        assert spans[slow["id"]]["status"] != ERROR and spans[slow["id"]]["events"] == []
        assert spans[failing["id"]]["seconds"] >= 0.2
        assert spans[failing["id"]]["status"] == ERROR
        assert spans[failing["id"]]["events"] == ["exception"]
        agent.signal(signal.SIGTERM)
        assert agent.wait() == 0
    finally:
        agent.kill()


def _left_behind_at_sigterm(
    hub: Hub, receiver: OtlpReceiver, notes: Path, how: str
) -> tuple[dict[str, Any], str]:
    """An `async_job` doing `how` (600 s) on an agent exporting to `receiver`, SIGTERMed
    once the handler began (`--shutdown-timeout 0`, stop grace 0.5 s) and exited 0: the
    job, and the agent's log."""
    job = hub.enqueue("async_job", {"log": str(notes), "sleep": 600, "how": how})
    agent = Agent(
        hub,
        "a1",
        extra=("--shutdown-timeout", "0"),
        env_extra={
            **PLUGINS,
            "JOBCORE_STOP_GRACE": "0.5",
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_METRICS_EXPORTER": "none",
        },
    )
    try:
        wait_until(lambda: notes.exists() and "start" in notes.read_text())
        agent.signal(signal.SIGTERM)
        assert agent.wait() == 0, agent.log()
    finally:
        agent.kill()
    return job, agent.log()


def test_an_agents_handler_left_behind_at_shutdown_still_ends_its_span(
    hub: Hub, receiver: OtlpReceiver, tmp_path: Path
) -> None:
    """An async handler that ignores every cancellation is left behind once its stop grace
    passed; the agent closes it before it exits, so its span ends (once, ERROR) and is
    exported by the SDK's last flush instead of being lost with the process."""
    notes = tmp_path / "notes"
    job, log = _left_behind_at_sigterm(hub, receiver, notes, "ignore_cancel")
    assert "its slot is given up" in log
    process = [span for span in receiver.spans if span["name"].startswith("process ")]
    assert [span["attributes"]["messaging.message.id"] for span in process] == [job["id"]]
    assert process[0]["status"] == ERROR and process[0]["events"] == ["exception"]
    assert "Failed to detach context" not in log


@pytest.mark.parametrize("how", ["ignore_cancel_await", "block"])
def test_an_agent_exits_past_a_handler_that_will_not_close(
    hub: Hub, receiver: OtlpReceiver, tmp_path: Path, how: str
) -> None:
    """A handler left behind whose `finally` awaits again (closing it ends its span, with
    no context error: the close came from outside its task), or one blocking the event
    loop (nothing can run there): the agent still exits 0 and names the job and why."""
    notes = tmp_path / "notes"
    job, log = _left_behind_at_sigterm(hub, receiver, notes, how)
    assert "Failed to detach context" not in log
    if how == "block":
        assert f"job {job['id']}: its async handler blocks the event loop" in log
        return
    assert f"job {job['id']}: its async handler awaited while being closed" in log
    assert "finally-awaited" not in notes.read_text()
    process = [span for span in receiver.spans if span["name"].startswith("process ")]
    assert [span["attributes"]["messaging.message.id"] for span in process] == [job["id"]]
    assert process[0]["status"] == ERROR
