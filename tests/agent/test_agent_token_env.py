"""Job processes an agent starts never see the agent's token (issue 17.23)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from hubenv import Agent, Hub
from test_agent_e2e import upload

from conftest import solver_source

pytest.importorskip("fastapi")

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[Hub]:
    hub = Hub(tmp_path, lease="5s")
    yield hub
    hub.close()


def test_shell_and_exec_jobs_do_not_inherit_the_agent_token(hub: Hub, tmp_path: Path) -> None:
    solver = solver_source("print(json.dumps(dict(os.environ)))")
    digest = upload(hub, solver, tmp_path)
    agent = Agent(hub, "a1", token_in_env=True, env_extra={"VISIBLE_TO_JOBS": "yes"})
    token = agent.token_file.read_text().strip()
    try:
        # its own environment, and the agent's as /proc shows it to processes of its user
        shell = hub.enqueue("shell", {"command": "env; tr '\\0' '\\n' < /proc/$PPID/environ"})
        exec_job = hub.enqueue("exec", {"sha256": digest})
        printed = hub.wait_status(shell["id"], "completed")["result"]["stdout"]
        assert "VISIBLE_TO_JOBS=yes" in printed  # the environment is passed on...
        assert "JOBCORE_AGENT_TOKEN" not in printed and token not in printed  # ...minus this
        environ = hub.wait_status(exec_job["id"], "completed")["result"]
        assert environ["VISIBLE_TO_JOBS"] == "yes"
        assert "JOBCORE_AGENT_TOKEN" not in environ and token not in json.dumps(environ)
    finally:
        agent.kill()
