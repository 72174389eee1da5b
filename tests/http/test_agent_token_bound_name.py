"""An agent token is bound to a worker id (its `--name` unless `--agent`); an agent started
under another id (by default its host name) gets a 403 whose fix is right: the worker id
to pass (`--worker-id`), or a token made for the agent's own id."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

from hubproc import JOBCORE, Hub, jobcore
from testenv import subprocess_env


def test_the_403_names_the_bound_worker_id_and_the_option(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    hub = Hub(db)
    try:
        token = jobcore(db, "tokens", "create", "--name", "box-1", "--scope", "agent").stdout
        with hub.client(token.strip()) as client:
            answer = client.post("/api/workers/register", json={"worker_id": "other-box"})
        assert answer.status_code == 403
        error = answer.json()["error"]
        assert "--worker-id box-1" in error and "--name other-box" in error, error
        agent = subprocess.run(
            [*JOBCORE, "--db", str(db), "agent", "--hub", hub.url],  # default id: the host name
            env=subprocess_env(JOBCORE_AGENT_TOKEN=token.strip()),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert agent.returncode != 0, agent.stderr
        assert "--worker-id box-1" in agent.stderr, agent.stderr
        assert f"not {socket.gethostname()!r}" in agent.stderr, agent.stderr
        assert "create a new agent token" not in agent.stderr, agent.stderr
    finally:
        assert hub.terminate() == 0, hub.output()
