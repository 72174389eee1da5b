"""`jobcore serve` and `jobcore tokens create|list|revoke`."""

from __future__ import annotations

import json
import ssl
from typing import Any

import click

from jobcore.cli import CliState, pass_state
from jobcore.cli.output import table
from jobcore.cli.params import DURATION
from jobcore.errors import JobcoreError
from jobcore_http.settings import HttpSettings, parse_size
from jobcore_http.store import hub_store_for
from jobcore_http.tokens import SCOPES, create_token, token_limits


class SizeType(click.ParamType):  # type: ignore[type-arg]
    name = "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        try:
            size = parse_size(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        if size <= 0:
            self.fail("must be > 0", param, ctx)
        return size


@click.command()
@click.option("--host", help="Address to bind (default 127.0.0.1; JOBCORE_HTTP_HOST).")
@click.option(
    "--port", type=click.IntRange(0, 65535), help="Port (default 8080; 0 picks a free one)."
)
@click.option("--max-body", type=SizeType(), help="Largest request body, e.g. 1MiB (default).")
@click.option("--lease", type=DURATION, help="Lease of remote claims (default: the core `lease`).")
@click.option(
    "--insecure-no-auth",
    is_flag=True,
    default=None,
    help="No tokens: every request acts as admin. Only on a trusted network.",
)
@click.option(
    "--tls-cert",
    type=click.Path(dir_okay=False),
    help="PEM certificate (chain) to serve HTTPS with; needs --tls-key.",
)
@click.option("--tls-key", type=click.Path(dir_okay=False), help="PEM private key of --tls-cert.")
@pass_state
def serve(
    state: CliState,
    host: str | None,
    port: int | None,
    max_body: int | None,
    lease: float | None,
    insecure_no_auth: bool | None,
    tls_cert: str | None,
    tls_key: str | None,
) -> None:
    """Run the hub: the HTTP API for producers, remote agents and the dashboard."""
    from jobcore_http.hub import Hub
    from jobcore_http.server import run

    if lease is not None:
        if lease <= 0:
            raise click.BadParameter("must be > 0", param_hint="--lease")
        state.override({"lease": lease})
    settings = state.config.plugin_settings("http", HttpSettings)
    changes = {
        key: value
        for key, value in {
            "host": host,
            "port": port,
            "max_body": max_body,
            "insecure_no_auth": insecure_no_auth,
            "tls_cert": tls_cert,
            "tls_key": tls_key,
        }.items()
        if value is not None
    }
    settings = settings.model_copy(update=changes)
    check_tls(settings)
    queue = state.queue()
    hub = Hub(queue, settings, lease=state.config.core.lease)
    run(hub, settings.host, settings.port)


def check_tls(settings: HttpSettings) -> None:
    """Both TLS files or neither, and loadable: one clear error before anything starts."""
    if bool(settings.tls_cert) != bool(settings.tls_key):
        raise JobcoreError("--tls-cert and --tls-key go together: pass both to serve HTTPS")
    if not settings.tls_cert or not settings.tls_key:
        return
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(
            settings.tls_cert, settings.tls_key, password=_no_passphrase
        )
    except (OSError, ssl.SSLError, _EncryptedKey) as exc:
        raise JobcoreError(
            f"cannot load --tls-cert {settings.tls_cert} / --tls-key {settings.tls_key}: "
            f"{getattr(exc, 'strerror', None) or exc}; give a PEM certificate and its "
            "unencrypted key"
        ) from None


class _EncryptedKey(Exception):
    def __str__(self) -> str:
        return "the key is passphrase-protected; decrypt it (openssl pkey -in KEY -out NEW)"


def _no_passphrase() -> bytes:
    """An encrypted key fails here instead of prompting on the terminal."""
    raise _EncryptedKey


@click.group()
def tokens() -> None:
    """Bearer tokens of the hub (stored hashed; shown once at creation)."""


def _store(state: CliState, *, create: bool) -> Any:
    store = hub_store_for(state.queue(create=create).storage)
    store.migrate()
    return store


@tokens.command("create")
@click.option("--name", required=True, help="A name to list and revoke it by.")
@click.option("--scope", required=True, type=click.Choice(SCOPES), help="What it may do.")
@click.option("--agent", "agent_id", help="Agent id an agent token acts for (default: its name).")
@click.option(
    "--types",
    metavar="T,…",
    help="Job types it may enqueue, cancel, retry (produce) or claim (agent); default any.",
)
@click.option("--queues", metavar="Q,…", help="Queues it may use likewise; default any.")
@pass_state
def create(
    state: CliState,
    name: str,
    scope: str,
    agent_id: str | None,
    types: str | None,
    queues: str | None,
) -> None:
    """Create a token and print it (only this once)."""
    from jobcore.timeutil import now_ms

    if not name.strip():
        raise click.BadParameter("must not be empty", param_hint="--name")
    if agent_id is not None and scope != "agent":
        raise click.BadParameter("goes only with --scope agent", param_hint="--agent")
    limits = token_limits(scope, types, queues, state.queue(create=True).job_type, prefix="--")
    token, _ = create_token(_store(state, create=True), name, scope, agent_id, now_ms(), limits)
    click.echo(token)


@tokens.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@pass_state
def list_tokens(state: CliState, as_json: bool) -> None:
    """Tokens: name, scope, agent, job types and queues it may use (`*`: any), created,
    revoked (never the token)."""
    records = [record.to_json() for record in _store(state, create=False).list_tokens()]
    if as_json:
        click.echo(json.dumps(records, indent=2))
        return
    rows = [
        (
            r["name"],
            r["scope"],
            r["agent_id"] or "",
            "*" if r["types"] is None else ",".join(r["types"]),
            "*" if r["queues"] is None else ",".join(r["queues"]),
            r["created_at"],
            r["revoked_at"] or "",
        )
        for r in records
    ]
    click.echo(table(rows, ("NAME", "SCOPE", "AGENT", "TYPES", "QUEUES", "CREATED", "REVOKED")))


@tokens.command("revoke")
@click.argument("name")
@pass_state
def revoke(state: CliState, name: str) -> None:
    """Revoke the token NAME; it stops working on the hub's next request."""
    from jobcore.timeutil import now_ms

    if not _store(state, create=False).revoke_token(name, now_ms()):
        raise JobcoreError(f"no active token named {name!r}; `jobcore tokens list` shows them")
    click.echo(f"revoked {name}", err=True)
