"""`jobcore agent` and `jobcore artifacts upload`."""

from __future__ import annotations

import ipaddress
import os
import ssl
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import click

from jobcore.cli import CliState, pass_state
from jobcore.cli.params import DURATION
from jobcore.errors import ConfigError, JobcoreError
from jobcore.owned import own
from jobcore_agent.settings import AgentSettings, split_list

if TYPE_CHECKING:
    from jobcore_agent.client import HubClient


def read_token(settings: AgentSettings) -> str | None:
    """The token from `token_file` (first line) or `JOBCORE_AGENT_TOKEN`; never logged."""
    if settings.token_file:
        try:
            text = Path(settings.token_file).read_text().strip()
        except OSError as exc:
            raise ConfigError(
                f"cannot read the token file {settings.token_file}: {exc.strerror}"
            ) from None
        if not text:
            raise ConfigError(f"the token file {settings.token_file} is empty")
        own(settings.token_file, "file")  # never a files job's target
        return text.splitlines()[0].strip()
    return settings.token or None


TOKEN_ENV = "JOBCORE_AGENT_TOKEN"


def forget_token_env() -> None:
    """Take the token out of this process's environment once read: every job process (shell,
    exec, any plugin's subprocess) inherits the environment and must not see it."""
    from jobcore_agent.environ import forget

    forget(TOKEN_ENV)


def load_settings(state: CliState, options: dict[str, object]) -> AgentSettings:
    base = state.config.plugin_settings("agent", AgentSettings)
    given = {key: value for key, value in options.items() if value not in (None, ())}
    return AgentSettings.model_validate({**base.model_dump(), **given})


def need_hub(settings: AgentSettings) -> str:
    if not settings.hub:
        raise ConfigError("no hub given: pass --hub URL or set JOBCORE_AGENT_HUB")
    if not settings.hub.startswith(("http://", "https://")):
        raise ConfigError(f"--hub {settings.hub!r} is not an http(s) URL")
    if settings.hub.startswith("http://") and not settings.insecure_http:
        host = urlsplit(settings.hub).hostname or ""
        if not _loopback(host):
            raise ConfigError(
                f"--hub {settings.hub} is plain HTTP to another machine: the token would "
                "travel in clear text; use an https:// hub (`jobcore serve --tls-cert/--tls-key` "
                "or a TLS proxy, plus --ca-file for a private CA), or pass --insecure-http "
                "on a trusted network"
            )
    return settings.hub


def _loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def tls_trust(settings: AgentSettings) -> ssl.SSLContext | bool:
    """What https:// connections trust: the system's CAs, plus `ca_file`'s when given."""
    if not settings.ca_file:
        return True
    context = ssl.create_default_context()
    try:
        context.load_verify_locations(cafile=settings.ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"cannot read the CA file {settings.ca_file}: "
            f"{getattr(exc, 'strerror', None) or exc}; give PEM CA certificate(s)"
        ) from None
    return context


def hub_client(settings: AgentSettings, token: str | None) -> HubClient:
    from jobcore_agent.client import HubClient

    return HubClient(
        need_hub(settings),
        token=token,
        timeout=settings.request_timeout,
        verify=tls_trust(settings),
        max_answer=settings.max_answer,
    )


def tls_options(command: Any) -> Any:
    """`--ca-file` and `--insecure-http`, shared by the commands that talk to a hub."""
    command = click.option(
        "--insecure-http",
        is_flag=True,
        default=None,
        help="Allow a plain http:// hub on another machine (the token travels in clear text).",
    )(command)
    return click.option(
        "--ca-file",
        type=click.Path(dir_okay=False),
        help="PEM CA certificate(s) to trust for an https:// hub ($JOBCORE_AGENT_CA_FILE).",
    )(command)


@click.command()
@click.option("--hub", help="The hub's URL, e.g. https://hub:8443 ($JOBCORE_AGENT_HUB).")
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False),
    help="File holding an agent-scope token (else $JOBCORE_AGENT_TOKEN).",
)
@click.option(
    "--worker-id",
    help="This agent's id (default: the host name); its token must be made for this id.",
)
@click.option("--types", "types", multiple=True, help="Only these job types (repeatable).")
@click.option("--queue", "queues", multiple=True, help="Only these queues (repeatable).")
@click.option("--concurrency", type=click.IntRange(1, 1024), help="Jobs run at once (default 4).")
@click.option("--tags", help="Comma-separated tags advertised to the hub, e.g. gpu,ssd.")
@click.option("--cache-dir", type=click.Path(file_okay=False), help="Artifacts and the outbox.")
@click.option(
    "--shutdown-timeout", type=DURATION, help="On SIGTERM, time running jobs get (default 30s)."
)
@tls_options
@pass_state
def agent(
    state: CliState,
    hub: str | None,
    token_file: str | None,
    worker_id: str | None,
    types: tuple[str, ...],
    queues: tuple[str, ...],
    concurrency: int | None,
    tags: str | None,
    cache_dir: str | None,
    shutdown_timeout: float | None,
    ca_file: str | None,
    insecure_http: bool | None,
) -> None:
    """Run jobs claimed from a hub over HTTP(S) (outbound requests only)."""
    from jobcore_agent.agent import Agent
    from jobcore_agent.capabilities import default_worker_id

    settings = load_settings(
        state,
        {
            "hub": hub,
            "token_file": token_file,
            "worker_id": worker_id,
            "types": ",".join(types) or None,
            "queues": ",".join(queues) or None,
            "concurrency": concurrency,
            "tags": tags,
            "cache_dir": cache_dir,
            "shutdown_timeout": shutdown_timeout,
            "ca_file": ca_file,
            "insecure_http": insecure_http,
        },
    )
    need_hub(settings)
    token = read_token(settings)
    forget_token_env()
    client = hub_client(settings, token)
    try:
        runner = Agent(
            state.queue(create=False),
            client,
            worker_id=settings.worker_id or default_worker_id(),
            cache_dir=os.path.abspath(os.path.expanduser(settings.cache_dir)),
            types=split_list(settings.types),
            queues=split_list(settings.queues),
            tags=split_list(settings.tags),
            concurrency=settings.concurrency,
            shutdown_timeout=settings.shutdown_timeout,
            max_backoff=settings.max_backoff,
            install_signal_handlers=True,
        )
        code = runner.run()
    finally:
        client.close()
    raise SystemExit(code)


@click.group()
def artifacts() -> None:
    """Executables stored on the hub for `exec` jobs."""


@artifacts.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--hub", help="The hub's URL ($JOBCORE_AGENT_HUB).")
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False),
    help="File holding an admin-scope token (else $JOBCORE_AGENT_TOKEN).",
)
@tls_options
@pass_state
def upload(
    state: CliState,
    file: str,
    hub: str | None,
    token_file: str | None,
    ca_file: str | None,
    insecure_http: bool | None,
) -> None:
    """Store FILE on the hub and print its sha256 (put it in `exec` payloads)."""
    from jobcore_agent.cache import file_sha256
    from jobcore_agent.client import HubError

    settings = load_settings(
        state,
        {"hub": hub, "token_file": token_file, "ca_file": ca_file, "insecure_http": insecure_http},
    )
    need_hub(settings)
    client = hub_client(settings, read_token(settings))
    try:
        answer = client.upload_artifact(Path(file).read_bytes())
    except HubError as exc:
        raise JobcoreError(str(exc)) from None
    finally:
        client.close()
    expected = file_sha256(file)
    if answer.get("sha256") != expected:
        raise JobcoreError(
            f"the hub stored {answer.get('sha256')!r} but {file} has sha256 {expected}; upload again"
        )
    click.echo(expected)
