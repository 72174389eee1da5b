"""Concurrency limits (DESIGN §16): `limit` and `limits`."""

from __future__ import annotations

import click

from jobcore import operating
from jobcore.cli import CliState, cli, pass_state
from jobcore.cli.output import emit_json, table
from jobcore.errors import InvalidPayload


def _whole(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise InvalidPayload(f"--concurrency must be a whole number from 1, not {text!r}") from None


@cli.command()
@click.argument("queue_name", metavar="QUEUE", required=False)
@click.option("--type", "type_name", help="Limit this job type (in every queue) instead.")
@click.option(
    "--per-key", is_flag=True, help="With --type: the limit holds per concurrency key instead."
)
@click.option("--concurrency", help="At most this many jobs claimed at once (from 1).")
@click.option("--clear", is_flag=True, help="Remove the limit instead.")
@click.option("--json", "as_json", is_flag=True)
@pass_state
def limit(
    state: CliState,
    queue_name: str | None,
    type_name: str | None,
    per_key: bool,
    concurrency: str | None,
    clear: bool,
    as_json: bool,
) -> None:
    """Allow at most N jobs of a queue (or type, or per key of a type) to run at once, across
    every worker and agent on the store; `--clear` removes the limit."""
    if (queue_name is None) == (type_name is None):
        raise click.UsageError("give either a QUEUE or --type T (exactly one)")
    if per_key and type_name is None:
        raise click.UsageError("--per-key goes with --type T")
    if clear == (concurrency is not None):
        raise click.UsageError("give either --concurrency N or --clear (exactly one)")
    scope = "queue" if queue_name is not None else "key" if per_key else "type"
    name = queue_name if queue_name is not None else type_name
    assert name is not None
    queue = state.queue(create=False)
    if clear:
        cleared = operating.clear_limit(queue, scope, name)
        if as_json:
            emit_json({"scope": scope, "name": name, "cleared": cleared is not None})
        else:
            click.echo(
                f"cleared the {scope} limit of {name}"
                if cleared
                else f"{name} had no {scope} limit"
            )
        return
    assert concurrency is not None
    made = operating.set_limit(queue, scope, name, _whole(concurrency))
    if as_json:
        emit_json(made.to_json())
        return
    per = " per key" if scope == "key" else ""
    click.echo(f"{scope} {name}: at most {made.concurrency} at once{per}")


@cli.command()
@click.option("--json", "as_json", is_flag=True)
@pass_state
def limits(state: CliState, as_json: bool) -> None:
    """Each concurrency limit: scope, name, N, where it comes from, and what it holds now."""
    rows = operating.limit_rows(state.queue(create=False))
    if as_json:
        emit_json({"limits": rows})
        return
    if not rows:
        click.echo("no concurrency limits")
        return
    click.echo(
        table(
            [
                (
                    r["scope"],
                    r["name"],
                    r["concurrency"],
                    f"{r['held']} keys full" if r["scope"] == "key" else r["held"],
                    r["source"],
                )
                for r in rows
            ],
            ["SCOPE", "NAME", "CONCURRENCY", "CLAIMED", "SOURCE"],
        )
    )
