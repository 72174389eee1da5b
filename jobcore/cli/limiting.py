"""Concurrency and rate limits (DESIGN §16): `limit` and `limits`."""

from __future__ import annotations

import click

from jobcore import operating
from jobcore.cli import CliState, cli, pass_state
from jobcore.cli.output import emit_json, table
from jobcore.cli.params import TEXT
from jobcore.concurrency import checked_limit
from jobcore.errors import InvalidPayload
from jobcore.rates import format_period, parse_rate


def _whole(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise InvalidPayload(f"--concurrency must be a whole number from 1, not {text!r}") from None


@cli.command()
@click.argument("queue_name", metavar="QUEUE", required=False, type=TEXT)
@click.option(
    "--type", "type_name", type=TEXT, help="Limit this job type (in every queue) instead."
)
@click.option(
    "--per-key", is_flag=True, help="With --type: the limit holds per concurrency key instead."
)
@click.option("--concurrency", help="At most this many jobs claimed at once (from 1).")
@click.option(
    "--rate",
    help="At most N jobs started per sliding period: N/PERIOD, e.g. 50/1m, 10/s, 5/500ms.",
)
@click.option("--clear", is_flag=True, help="Remove the limit (concurrency and rate) instead.")
@click.option("--json", "as_json", is_flag=True)
@pass_state
def limit(
    state: CliState,
    queue_name: str | None,
    type_name: str | None,
    per_key: bool,
    concurrency: str | None,
    rate: str | None,
    clear: bool,
    as_json: bool,
) -> None:
    """Allow at most N jobs of a queue (or type, or per key of a type) to run at once, or to
    start per period, across every worker and agent on the store; `--clear` removes both."""
    if (queue_name is None) == (type_name is None):
        raise click.UsageError("give either a QUEUE or --type T (exactly one)")
    if per_key and type_name is None:
        raise click.UsageError("--per-key goes with --type T")
    if clear == (concurrency is not None or rate is not None):
        raise click.UsageError(
            "give --concurrency N and/or --rate N/PERIOD, or --clear (not both, not neither)"
        )
    scope = "queue" if queue_name is not None else "key" if per_key else "type"
    name = queue_name if queue_name is not None else type_name
    assert name is not None
    queue = state.queue(create=False)
    if clear:
        cleared = operating.clear_limit(queue, scope, name)
        cleared_rate = operating.clear_rate(queue, scope, name)
        gone = cleared is not None or cleared_rate is not None
        if as_json:
            emit_json({"scope": scope, "name": name, "cleared": gone})
        else:
            click.echo(
                f"cleared the {scope} limit of {name}" if gone else f"{name} had no {scope} limit"
            )
        return
    # every value is checked before anything is written: bad input changes nothing
    whole = None if concurrency is None else _whole(concurrency)
    if whole is not None:
        checked_limit(scope, name, whole)
    pair = None if rate is None else parse_rate(rate, "--rate")
    made: dict[str, object] = {"scope": scope, "name": name}
    per = " per key" if scope == "key" else ""
    lines = []
    if whole is not None:
        made |= operating.set_limit(queue, scope, name, whole).to_json()
        lines.append(f"{scope} {name}: at most {made['concurrency']} at once{per}")
    if pair is not None:
        stored = operating.set_rate(queue, scope, name, pair[0], pair[1] / 1000)
        made |= stored.to_json()
        lines.append(
            f"{scope} {name}: at most {stored.rate} started per {format_period(stored.period_ms)}{per}"
        )
    if as_json:
        emit_json(made)
        return
    click.echo("\n".join(lines))


@cli.command()
@click.option("--json", "as_json", is_flag=True)
@pass_state
def limits(state: CliState, as_json: bool) -> None:
    """Each concurrency and rate limit: scope, name, N, where it comes from, and what it holds
    now (for a rate limit: the starts in its current window, and until when a handler's
    `RetryAfter(..., limit=True)` holds it full)."""
    rows = operating.limit_rows(state.queue(create=False))
    if as_json:
        emit_json({"limits": rows})
        return
    if not rows:
        click.echo("no concurrency or rate limits")
        return
    click.echo(
        table(
            [
                (
                    r["scope"],
                    r["name"],
                    _limit_text(r),
                    _use_text(r),
                    r["source"],
                )
                for r in rows
            ],
            ["SCOPE", "NAME", "LIMIT", "NOW", "SOURCE"],
        )
    )


def _limit_text(row: dict[str, object]) -> str:
    if row["concurrency"] is not None:
        return f"{row['concurrency']} at once"
    period = row["period"]
    assert isinstance(period, int | float)
    return f"{row['rate']}/{format_period(round(period * 1000))}"


def _use_text(row: dict[str, object]) -> str:
    full = f"{row['held' if row['concurrency'] is not None else 'used']}"
    if row["scope"] == "key":
        text = f"{full} keys full"
    else:
        text = f"{full} claimed" if row["concurrency"] is not None else f"{full} started"
    held_until = row.get("held_until")
    return text if held_until is None else f"{text}, held until {held_until}"
