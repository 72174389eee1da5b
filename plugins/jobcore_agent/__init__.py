"""jobcore plugin `agent`: `jobcore agent` runs jobs claimed from a hub over HTTP (DESIGN §12).

Also registers the job type `exec` (a checksummed executable fetched by URL or
from the hub's artifact store) and `jobcore artifacts upload`.
"""

from __future__ import annotations

from collections.abc import Callable

import click

from jobcore import Config, JobType, hookimpl
from jobcore.plugins import require

require("httpx", extra="agent")


@hookimpl
def jobcore_configure(config: Config) -> None:
    """Validate `[plugins.agent]` / `JOBCORE_AGENT_*` at start (a bad one is one `Error:`)."""
    from jobcore_agent.settings import AgentSettings

    config.plugin_settings("agent", AgentSettings)


@hookimpl
def jobcore_register_job_types(register: Callable[[JobType], None]) -> None:
    from jobcore_agent.exec_job import EXEC

    register(EXEC)


@hookimpl
def jobcore_register_commands(cli: click.Group) -> None:
    from jobcore_agent.commands import agent, artifacts

    cli.add_command(agent)
    cli.add_command(artifacts)
