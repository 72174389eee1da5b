"""Review: an `exec` payload's `url` comes from producers, yet the agent sent its token
with any url on the hub. `url: <hub>/api/queue` made the agent claim someone
else's job through the JSON queue with its own token and drop it (checksum
mismatch): that job sat claimed until its lease expired, an attempt spent
(a `max_attempts: 1` job failed without ever running). The token now goes
only with the hub's own artifact downloads."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hubenv import Agent, Hub, pause, wait_until
from jobcore_agent.client import HubClient

pytest.importorskip("fastapi")
pytestmark = pytest.mark.timeout(120)


def test_the_token_goes_only_with_artifact_downloads() -> None:
    client = HubClient("http://hub:8080", token="secret")
    try:
        assert client.owns("http://hub:8080/api/artifacts/" + "ab" * 32)
        for url in (
            "http://hub:8080/api/queue",
            "http://hub:8080/api/jobs",
            "http://hub:8080/api/artifacts/x/../../queue",
            "http://hub:8080/api/artifacts/abc?x=1",
            "http://hub:8080@evil.example/api/artifacts/" + "ab" * 32,
            "http://hub:80800/api/artifacts/" + "ab" * 32,
        ):
            assert not client.owns(url), url
    finally:
        client.close()


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[Hub]:
    hub = Hub(tmp_path, lease="3s")
    yield hub
    hub.close()


def test_an_exec_url_on_the_hub_claims_nothing_with_the_agents_token(hub: Hub) -> None:
    victim = hub.admin.post("/api/queue", json={"type": "noop", "data": {}})
    assert victim.status_code == 201, victim.text
    agent = Agent(hub, "review-exec", extra=("--types", "exec"))
    try:
        wait_until(agent.registered)
        job = hub.enqueue("exec", {"url": hub.url + "/api/queue", "sha256": "0" * 64})
        error = wait_until(lambda: hub.job(job["id"])["last_error"])
        assert "solver_checksum_mismatch" not in error, error  # nothing was downloaded
        pause(0.5)
        left = hub.job(victim.json()["id"])
        assert left["status"] == "pending" and left["attempts"] == 0, left
    finally:
        agent.kill()
