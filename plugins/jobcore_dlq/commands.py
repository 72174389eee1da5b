"""`jobcore dlq …`: list, show, summary, retry, export and purge failed jobs."""

from __future__ import annotations

import json
import sys

import click

from jobcore import JobStatus
from jobcore.cli import CliState, pass_state
from jobcore.cli.output import emit_json, job_detail, job_rows, short, table
from jobcore.cli.params import DURATION
from jobcore_dlq import summarize

FAILED = [JobStatus.FAILED.value]


def interactive() -> bool:
    """True when a person can answer a question (stdin and stderr are terminals)."""
    return sys.stdin.isatty() and sys.stderr.isatty()


@click.group()
def dlq() -> None:
    """Failed jobs: the dead-letter queue."""


@dlq.command("list")
@click.option("--type", "types", multiple=True, help="Only this type (repeatable).")
@click.option("--since", type=DURATION, help="Only jobs that failed within this long, e.g. 1h.")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@pass_state
def list_failed(
    state: CliState, types: tuple[str, ...], since: float | None, limit: int, as_json: bool
) -> None:
    """Failed jobs, newest first."""
    queue = state.queue(create=False)
    # the store's clock stamped completed_at (PostgreSQL: the server's), not this machine's
    after = None if since is None else queue.storage.now() - int(since * 1000)
    jobs = queue.storage.list_jobs(statuses=FAILED, types=types, finished_after=after, limit=limit)
    if as_json:
        emit_json([job.to_json() for job in jobs])
    elif jobs:
        click.echo(job_rows(jobs))
    else:
        click.echo("no failed jobs", err=True)


@dlq.command()
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True)
@pass_state
def show(state: CliState, job_id: str, as_json: bool) -> None:
    """One failed job with its whole error history."""
    job = state.queue(create=False).get(job_id)
    if job.status is not JobStatus.FAILED:
        raise click.ClickException(f"job {job_id} is {job.status}, not failed")
    if as_json:
        emit_json(job.to_json())
    else:
        click.echo(job_detail(job))


@dlq.command()
@click.option("--type", "types", multiple=True, help="Only this type (repeatable).")
@click.option("--json", "as_json", is_flag=True)
@pass_state
def summary(state: CliState, types: tuple[str, ...], as_json: bool) -> None:
    """Failed jobs grouped by error signature (ids, numbers, paths, hosts and hex stripped)."""
    jobs = list(state.queue(create=False).storage.scan(statuses=FAILED, types=types))
    groups = summarize(jobs)
    if as_json:
        emit_json(groups)
        return
    if not groups:
        click.echo("no failed jobs", err=True)
        return
    rows = [
        (g["count"], ",".join(g["types"]), short(g["signature"], 90), g["example_id"])
        for g in groups
    ]
    click.echo(table(rows, ["COUNT", "TYPES", "SIGNATURE", "EXAMPLE"]))


@dlq.command()
@click.argument("job_ids", nargs=-1)
@click.option(
    "--all", "retry_all", is_flag=True, help="Retry every failed job (narrow with --type)."
)
@click.option("--type", "types", multiple=True, help="With --all: only this type (repeatable).")
@pass_state
def retry(
    state: CliState, job_ids: tuple[str, ...], retry_all: bool, types: tuple[str, ...]
) -> None:
    """Send failed jobs back to pending; attempts reset, error history kept."""
    if retry_all == bool(job_ids):
        raise click.UsageError("give job ids or --all (not both)")
    if types and not retry_all:
        raise click.UsageError("--type goes with --all")
    queue = state.queue(create=False)
    jobs = queue.retry_failed(types) if retry_all else queue.retry(job_ids)
    for job in jobs:
        click.echo(f"{job.id} pending")
    click.echo(f"retried {len(jobs)} job(s)", err=True)


@dlq.command()
@click.option("--format", "fmt", type=click.Choice(["jsonl"]), default="jsonl", show_default=True)
@click.option("--type", "types", multiple=True, help="Only this type (repeatable).")
@pass_state
def export(state: CliState, fmt: str, types: tuple[str, ...]) -> None:
    """Write every failed job to stdout, one JSON object per line."""
    count = 0
    for job in state.queue(create=False).storage.scan(statuses=FAILED, types=types):
        click.echo(json.dumps(job.to_json(), separators=(",", ":")))
        count += 1
    click.echo(f"exported {count} failed job(s)", err=True)


@dlq.command()
@click.option(
    "--older-than",
    type=DURATION,
    default="0s",
    help="Only jobs that failed longer ago than this, e.g. 7d.",
)
@click.option("--type", "types", multiple=True, help="Only this type (repeatable).")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@pass_state
def purge(state: CliState, older_than: float, types: tuple[str, ...], yes: bool) -> None:
    """Delete failed jobs for good."""
    queue = state.queue(create=False)
    before = queue.storage.now() - int(older_than * 1000)  # the store's clock, as on jobs
    doomed = sum(
        1
        for job in queue.storage.scan(statuses=FAILED, types=types)
        if (job.completed_at or 0) < before
    )
    if doomed == 0:
        click.echo("deleted 0 job(s)")
        return
    if not yes:
        if not interactive():
            raise click.ClickException(
                f"refusing to delete {doomed} failed job(s) without --yes (not on a terminal)"
            )
        click.confirm(f"Delete {doomed} failed job(s) for good?", abort=True, err=True)
    deleted = queue.storage.prune(before=before, statuses=FAILED, types=types)
    click.echo(f"deleted {deleted} job(s)")
