"""Commands about individual jobs: enqueue, list, show, retry, cancel."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator
from typing import IO, Any

import click

from jobcore.cli import CliState, cli, pass_state
from jobcore.cli.output import emit_json, job_detail, job_rows
from jobcore.cli.params import (
    DURATION,
    INT32,
    NON_EMPTY,
    POSITIVE_DURATION,
    POSITIVE_INT32,
    TEXT,
    TIME,
)
from jobcore.errors import InvalidPayload, JobcoreError
from jobcore.models import JobStatus


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range for a number")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _parse_object(text: str, where: str) -> dict[str, Any]:
    try:
        value = json.loads(text, parse_float=_finite, parse_constant=_no_constant)
    except ValueError as exc:  # json.JSONDecodeError, or a non-finite number
        raise InvalidPayload(f"{where} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidPayload(f"{where} must be a JSON object, not {type(value).__name__}")
    return value


def _text(data: bytes, where: str) -> str:
    """`data` decoded as UTF-8, or InvalidPayload naming `where` and the offending byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidPayload(
            f"{where} is not UTF-8: byte 0x{data[exc.start]:02x} at offset {exc.start}"
        ) from None


def read_payload(arg: str | None) -> dict[str, Any]:
    """PAYLOAD is a JSON object, `-` for stdin, or `@file`; absent means `{}`."""
    if arg is None:
        return {}
    if arg == "-":
        where = "payload from stdin"
        return _parse_object(_text(sys.stdin.buffer.read(), where), where)
    if arg.startswith("@"):
        where = f"payload file {arg[1:]}"
        try:
            with open(arg[1:], "rb") as handle:
                data = handle.read()
        except OSError as exc:
            raise InvalidPayload(f"cannot read payload file {arg[1:]}: {exc.strerror}") from None
        return _parse_object(_text(data, where), where)
    return _parse_object(arg, "payload")


def read_lines(handle: IO[bytes], name: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, payload) for each non-blank line of a JSONL file."""
    for number, raw in enumerate(handle, start=1):
        line = _text(raw, f"{name} line {number}")
        if line.strip():
            yield number, _parse_object(line, f"{name} line {number}")


@cli.command()
@click.argument("job_type", metavar="TYPE", type=TEXT)
@click.argument("payload", required=False)
@click.option(
    "--from",
    "from_file",
    type=click.File("rb"),
    help="JSONL file: one payload object per line, all in one transaction.",
)
@click.option("--queue", type=NON_EMPTY, help="Named queue (default: the type's, else 'default').")
@click.option("--priority", type=INT32, help="Higher runs first (default 0).")
@click.option("--delay", type=DURATION, help="Run no earlier than this from now (e.g. 30s, 5m).")
@click.option(
    "--run-at",
    type=TIME,
    help="Run no earlier than this ISO-8601 time (UTC unless an offset is given).",
)
@click.option("--max-attempts", type=POSITIVE_INT32, help="Attempts before the job fails.")
@click.option("--timeout", type=POSITIVE_DURATION, help="Maximum runtime of one attempt.")
@click.option(
    "--idempotency-key", type=NON_EMPTY, help="At most one unfinished job per type and key."
)
@click.option("--json", "as_json", is_flag=True, help="Print the job (with `created`) as JSON.")
@pass_state
def enqueue(
    state: CliState,
    job_type: str,
    payload: str | None,
    from_file: IO[bytes] | None,
    as_json: bool,
    **options: Any,
) -> None:
    """Enqueue a job of TYPE with a JSON PAYLOAD (`-` for stdin, `@file`), or many --from a file."""
    if options["delay"] is not None and options["run_at"] is not None:
        raise click.UsageError("give either --delay or --run-at, not both")
    queue = state.queue()
    if from_file is not None:
        if payload is not None:
            raise click.UsageError("give either PAYLOAD or --from, not both")
        queue.job_type(job_type)  # an unknown type is reported before reading the file
        lines = list(read_lines(from_file, from_file.name))
        jobs = []
        show_bar = sys.stderr.isatty()
        with click.progressbar(
            lines, label="validating", file=sys.stderr, hidden=not show_bar
        ) as bar:
            for number, line_payload in bar:
                try:
                    jobs.append(queue.build(job_type, line_payload, **options))
                except JobcoreError as exc:
                    raise type(exc)(f"{from_file.name} line {number}: {exc}") from None
        inserted = queue.insert(jobs)  # one transaction: all lines or none
        if as_json:
            emit_json([{**item.job.to_json(), "created": item.created} for item in inserted])
        else:
            for item in inserted:
                click.echo(item.job.id)
            created = sum(item.created for item in inserted)
            click.echo(
                f"enqueued {created} job(s), {len(inserted) - created} duplicate(s)", err=True
            )
        return
    result = queue.enqueue(job_type, read_payload(payload), **options)
    if as_json:
        emit_json({**result.job.to_json(), "created": result.created})
    else:
        click.echo(result.job.id)
        if not result.created:
            click.echo(
                f"job {result.job.id} with idempotency key {result.job.idempotency_key!r} "
                f"is already {result.job.status}; not enqueued again",
                err=True,
            )


STATUS_CHOICE = click.Choice([status.value for status in JobStatus])


@cli.command("list")
@click.option(
    "--status", multiple=True, type=STATUS_CHOICE, help="Only jobs in this status (repeatable)."
)
@click.option(
    "--type", "types", multiple=True, type=TEXT, help="Only jobs of this type (repeatable)."
)
@click.option(
    "--queue", "queues", multiple=True, type=TEXT, help="Only jobs in this queue (repeatable)."
)
@click.option("--limit", type=POSITIVE_INT32, default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@pass_state
def list_jobs(
    state: CliState,
    status: tuple[str, ...],
    types: tuple[str, ...],
    queues: tuple[str, ...],
    limit: int,
    as_json: bool,
) -> None:
    """List jobs, newest first."""
    jobs = state.queue(create=False).list_jobs(
        statuses=status, types=types, queues=queues, limit=limit
    )
    if as_json:
        emit_json([job.to_json() for job in jobs])
    elif jobs:
        click.echo(job_rows(jobs))
    else:
        click.echo("no jobs", err=True)


@cli.command()
@click.argument("job_id", type=TEXT)
@click.option("--json", "as_json", is_flag=True)
@pass_state
def show(state: CliState, job_id: str, as_json: bool) -> None:
    """Show one job with its error history and result."""
    job = state.queue(create=False).get(job_id)
    if as_json:
        emit_json(job.to_json())
    else:
        click.echo(job_detail(job))


@cli.command()
@click.argument("job_ids", nargs=-1, type=TEXT)
@click.option("--failed", is_flag=True, help="Retry every failed job (narrow with --type).")
@click.option(
    "--type",
    "types",
    multiple=True,
    type=TEXT,
    help="With --failed: only this type (repeatable).",
)
@click.option("--json", "as_json", is_flag=True)
@pass_state
def retry(
    state: CliState, job_ids: tuple[str, ...], failed: bool, types: tuple[str, ...], as_json: bool
) -> None:
    """Put failed or cancelled jobs back to pending (attempts reset, history kept)."""
    if failed == bool(job_ids):
        raise click.UsageError("give job ids or --failed (not both)")
    if types and not failed:
        raise click.UsageError("--type goes with --failed")
    queue = state.queue(create=False)
    jobs = queue.retry_failed(types) if failed else queue.retry(job_ids)
    if as_json:
        emit_json([job.to_json() for job in jobs])
    else:
        for job in jobs:
            click.echo(f"{job.id} pending")
        click.echo(f"retried {len(jobs)} job(s)", err=True)


@cli.command()
@click.argument("job_ids", nargs=-1, required=True, type=TEXT)
@click.option("--json", "as_json", is_flag=True)
@pass_state
def cancel(state: CliState, job_ids: tuple[str, ...], as_json: bool) -> None:
    """Cancel scheduled/pending jobs; ask running ones to stop."""
    jobs = state.queue(create=False).cancel(job_ids)
    if as_json:
        emit_json([job.to_json() for job in jobs])
    else:
        for job in jobs:
            state_text = "cancel requested" if job.status is JobStatus.CLAIMED else str(job.status)
            click.echo(f"{job.id} {state_text}")
