"""jobcore plugin `http`: `jobcore serve`, the hub (DESIGN §11), and `jobcore tokens`.

An HTTP API (FastAPI on uvicorn) in front of one store, for producers that
are not Python, remote agents (`jobcore agent`) and the dashboard. Needs the
extra `http` (from the checkout: `pip install -e '.[http]'`).
"""

from __future__ import annotations

import click

from jobcore import Config, hookimpl
from jobcore.plugins import require

require("fastapi", extra="http")
require("uvicorn", extra="http")


class HttpPlugin:
    @hookimpl
    def jobcore_configure(self, config: Config) -> None:
        """Validate `[plugins.http]` / `JOBCORE_HTTP_*` at start (a bad one is one `Error:`)."""
        from jobcore_http.settings import HttpSettings

        config.plugin_settings("http", HttpSettings)

    @hookimpl
    def jobcore_register_commands(self, cli: click.Group) -> None:
        from jobcore_http.cli import serve, tokens

        cli.add_command(serve)
        cli.add_command(tokens)


plugin = HttpPlugin()

__all__ = ["HttpPlugin", "plugin"]
