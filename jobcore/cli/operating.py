"""Operating a queue (DESIGN §16): `pause`, `resume` and `queues`."""

from __future__ import annotations

import click

from jobcore import operating
from jobcore.cli import CliState, cli, pass_state
from jobcore.cli.output import emit_json, short, table
from jobcore.cli.params import TEXT


def _target(queue_name: str | None, type_name: str | None) -> tuple[str, str]:
    """(kind, name) from `QUEUE` or `--type T`: exactly one of them (else a usage error)."""
    if (queue_name is None) == (type_name is None):
        raise click.UsageError("give either a QUEUE or --type T (exactly one)")
    if type_name is not None:
        return "type", type_name
    assert queue_name is not None
    return "queue", queue_name


@cli.command()
@click.argument("queue_name", metavar="QUEUE", required=False, type=TEXT)
@click.option(
    "--type", "type_name", type=TEXT, help="Pause this job type (in every queue) instead."
)
@click.option("--reason", default="", type=TEXT, help="Why; shown by `jobcore queues` and `stats`.")
@click.option("--json", "as_json", is_flag=True)
@pass_state
def pause(
    state: CliState, queue_name: str | None, type_name: str | None, reason: str, as_json: bool
) -> None:
    """Stop claiming a queue's (or a type's) jobs; running jobs finish, enqueue still works."""
    kind, name = _target(queue_name, type_name)
    made, created = operating.pause(state.queue(create=False), kind, name, reason=reason)
    if as_json:
        emit_json({**made.to_json(), "created": created})
        return
    if created:
        click.echo(f"paused {kind} {name}")
    else:
        click.echo(f"{kind} {name} was already paused since {made.to_json()['since']}")


@cli.command()
@click.argument("queue_name", metavar="QUEUE", required=False, type=TEXT)
@click.option("--type", "type_name", type=TEXT, help="Resume this job type instead.")
@click.option("--json", "as_json", is_flag=True)
@pass_state
def resume(state: CliState, queue_name: str | None, type_name: str | None, as_json: bool) -> None:
    """Let workers claim a paused queue's (or type's) jobs again."""
    kind, name = _target(queue_name, type_name)
    lifted = operating.resume(state.queue(create=False), kind, name)
    if as_json:
        emit_json({"kind": kind, "name": name, "resumed": lifted is not None})
        return
    click.echo(f"resumed {kind} {name}" if lifted else f"{kind} {name} was not paused")


@cli.command()
@click.option("--json", "as_json", is_flag=True)
@pass_state
def queues(state: CliState, as_json: bool) -> None:
    """Each queue: depth (scheduled, pending, claimed), and whether paused, why, since, by whom."""
    queue = state.queue(create=False)
    rows = operating.queue_rows(queue)
    types = [p for p in queue.storage.pauses() if p.kind == "type"]
    if as_json:
        emit_json({"queues": rows, "paused_types": [p.to_json() for p in types]})
        return
    click.echo(
        table(
            [
                (
                    r["queue"],
                    r["scheduled"],
                    r["pending"],
                    r["claimed"],
                    r["concurrency"] or "",
                    "PAUSED" if r["paused"] else "",
                    r["since"] or "",
                    r["by"] or "",
                    short(r["reason"] or "", 50),
                )
                for r in rows
            ],
            [
                "QUEUE",
                "SCHEDULED",
                "PENDING",
                "CLAIMED",
                "LIMIT",
                "PAUSED",
                "SINCE",
                "BY",
                "REASON",
            ],
        )
        if rows
        else "no queues with unfinished jobs or pauses"
    )
    for p in types:
        click.echo(f"type {p.name} PAUSED since {p.to_json()['since']} by {p.by}: {p.reason}")
