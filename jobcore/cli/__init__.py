"""The `jobcore` command line: a click group whose state lives in `ctx.obj`.

Nothing is loaded at import time: the plugin manager is built when a command
runs (or when plugin commands are listed) and kept on the root context.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from functools import update_wrapper
from typing import Any, TypeVar

import click

from jobcore.cli.errors import errors_as_click
from jobcore.config import Config
from jobcore.install import DISTRIBUTION, missing_command_hint
from jobcore.logs import configure_logging, one_line
from jobcore.plugins import JobcorePluginManager, make_plugin_manager
from jobcore.queue import Queue

F = TypeVar("F", bound=Callable[..., Any])

PM_KEY = "jobcore.pm"

LOG_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


class CliState:
    """Global options, and the plugin manager, config and queue built from them on demand."""

    def __init__(
        self,
        *,
        db: str | None,
        config_file: str | None,
        log_format: str | None,
        pm: JobcorePluginManager,
        log_level: str | None = None,
    ) -> None:
        self.db = db
        self.config_file = config_file
        self.log_format = log_format
        self.pm = pm
        self._options: dict[str, Any] = {"db": db, "log_format": log_format}
        self._options["log_level"] = log_level
        self._config: Config | None = None
        self._queues: list[Queue] = []

    @property
    def config(self) -> Config:
        if self._config is None:
            self._config = Config.load(self.config_file, options=self._options)
        return self._config

    def override(self, options: dict[str, Any]) -> None:
        """Apply a command's own options (highest precedence) and reload the config."""
        self._options.update({key: value for key, value in options.items() if value is not None})
        self._config = None

    @property
    def db_name(self) -> str:
        """The database the command works on, for error messages (even with a bad config)."""
        try:
            return self.config.core.db
        except Exception:
            return self.db or "the database"

    def queue(self, *, create: bool = True) -> Queue:
        """A Queue on the configured database; `create=False` for commands that only read."""
        queue = Queue(config=self.config, pm=self.pm, create=create)
        self._queues.append(queue)
        return queue

    def close(self) -> None:
        for queue in self._queues:
            queue.close()


def plugin_manager(ctx: click.Context) -> JobcorePluginManager:
    """The root context's plugin manager, built once per invocation."""
    root = ctx.find_root()
    pm: JobcorePluginManager | None = root.meta.get(PM_KEY)
    if pm is None:
        pm = make_plugin_manager()
        root.meta[PM_KEY] = pm
    return pm


class JobcoreGroup(click.Group):
    """A group that also offers the commands plugins add through `jobcore_register_commands`."""

    def _plugin_commands(self, ctx: click.Context) -> dict[str, click.Command]:
        root = ctx.find_root()
        cached: dict[str, click.Command] | None = root.meta.get("jobcore.commands")
        if cached is None:
            collector = click.Group()
            pm = plugin_manager(ctx)
            for impl in reversed(pm.hook.jobcore_register_commands.get_hookimpls()):
                try:
                    impl.function(cli=collector)
                except Exception as exc:  # a broken plugin must not break the CLI
                    pm.mark_unavailable(impl.plugin_name, f"adding commands failed: {exc}")
            cached = {
                name: cmd for name, cmd in collector.commands.items() if name not in self.commands
            }
            root.meta["jobcore.commands"] = cached
        return cached

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*self.commands, *self._plugin_commands(ctx)])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return self.commands.get(cmd_name) or self._plugin_commands(ctx).get(cmd_name)

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.ClickException as exc:
            raise _on_one_line(exc) from exc.__cause__

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.ClickException as exc:
            raise _on_one_line(exc) from exc.__cause__

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = click.utils.make_str(args[0]) if args else None
        if name is not None and self.get_command(ctx, name) is None:
            hint = missing_command_hint(name)
            if hint is not None and not ctx.resilient_parsing:
                ctx.fail(f"No such command {name!r}. {hint}")
        return super().resolve_command(ctx, args)


def _on_one_line(exc: click.ClickException) -> click.ClickException:
    """`exc` with control characters in its message escaped (`logs.one_line`): a payload
    key, a job type or an argument holding a newline cannot add a forged `Error:` line
    (DESIGN §8: one line)."""
    exc.message = one_line(exc.message)  # type: ignore[misc]  # click types it Final
    return exc


def pass_state(fn: F) -> F:
    """Pass the `CliState` as the first argument; expected failures become `Error: …`, exit 1."""

    @click.pass_context
    def wrapper(ctx: click.Context, *args: Any, **kwargs: Any) -> Any:
        state: CliState = ctx.find_object(CliState)  # type: ignore[assignment]
        with errors_as_click(state.db_name):
            return ctx.invoke(fn, state, *args, **kwargs)

    return update_wrapper(wrapper, fn)  # type: ignore[return-value]


@click.group(cls=JobcoreGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--db", metavar="URL_OR_PATH", help="Database (default: $JOBCORE_DB, else ./jobcore.db)."
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    help="Config file (default: $JOBCORE_CONFIG, else ./jobcore.toml if present).",
)
@click.option("--log-format", type=click.Choice(["text", "json"]), help="Format of logs on stderr.")
@click.option(
    "--log-level",
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
    help="Least severe log level on stderr (default: $JOBCORE_LOG_LEVEL, else `log_level` "
    "of the config file, else info); `debug` adds details such as why a plugin is unavailable.",
)
@click.version_option(package_name=DISTRIBUTION)
@click.pass_context
def cli(
    ctx: click.Context,
    db: str | None,
    config_file: str | None,
    log_format: str | None,
    log_level: str | None,
) -> None:
    """jobcore: a durable job queue on SQLite."""
    state = CliState(
        db=db,
        config_file=config_file,
        log_format=log_format,
        log_level=log_level.lower() if log_level else None,
        pm=plugin_manager(ctx),
    )
    ctx.obj = state
    ctx.call_on_close(state.close)
    with errors_as_click(state.db_name):
        core = state.config.core
        configure_logging(core.log_format, level=LOG_LEVELS[core.log_level])


def main(argv: list[str] | None = None) -> Any:
    """Console-script entry point."""
    return cli.main(args=argv if argv is not None else sys.argv[1:], prog_name="jobcore")


from jobcore.cli import admin, jobs, limiting, operating, run  # noqa: E402  (commands register on `cli`)

__all__ = ["admin", "cli", "jobs", "limiting", "main", "operating", "run"]
