"""`jobcore schedules`: each schedule with its next and last run."""

from __future__ import annotations

from typing import Any

import click

from jobcore import Queue
from jobcore.cli import CliState, pass_state
from jobcore.cli.output import emit_json, table
from jobcore.timeutil import iso
from jobcore_cron.spec import Schedule
from jobcore_cron.store import Run, State, read_latest


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@pass_state
def schedules(state: CliState, as_json: bool) -> None:
    """Recurring jobs: when each runs next, and its last run."""
    from jobcore_cron import schedules_of
    from jobcore_cron.scheduler import check

    queue = state.queue(create=False)
    found = schedules_of(queue.config)
    problems = check(queue, found)
    if problems:
        raise click.ClickException(next(iter(problems.values())))
    from jobcore_cron.health import rows as health_rows

    rows = health_rows(queue, found)  # with due_at, lag_seconds and health, as in stats
    if as_json:
        emit_json(rows)
    elif rows:
        click.echo(
            table(
                [
                    [
                        row["name"],
                        row["when"],
                        row["type"],
                        row["policy"],
                        row["next_run_at"],
                        row["last_run_at"] or "never",
                        _job_cell(row["last_job"]),
                    ]
                    for row in rows
                ],
                ["NAME", "WHEN", "TYPE", "POLICY", "NEXT", "LAST", "LAST JOB"],
            )
        )
    else:
        click.echo("no schedules (declare them in [plugins.cron.schedules.NAME])", err=True)


def _job_cell(job: dict[str, Any] | None) -> str:
    return "" if job is None else f"{job['id']} {job['status']}"


def describe(
    queue: Queue,
    found: list[Schedule],
    recorded: dict[str, tuple[State, Run | None]] | None = None,
) -> list[dict[str, Any]]:
    """`{name, when, type, queue, policy, next_run_at, last_run_at, last_job, runs}` per
    schedule; `recorded` (`CronStore.latest`) is read from the store when not given."""
    if recorded is None:
        recorded = read_latest(queue.storage, queue.transaction)
    now = queue.storage.now()
    rows = []
    for item in found:
        seen, last = recorded.get(item.name, (None, None))
        start = max(now, seen.last_at) if seen is not None else now
        job = None  # its status read with the run (`latest_of`): no query per schedule
        if last is not None:
            job = {"id": last.job_id, "status": last.job_status or "pruned"}
        rows.append(
            {
                "name": item.name,
                "when": item.when,
                "type": item.type,
                "queue": item.queue,
                "policy": item.policy,
                "next_run_at": iso(next(iter(item.timing.times_after(start)))),
                "last_run_at": iso(last.scheduled_at) if last is not None else None,
                "last_job": job,
                "runs": seen.runs if seen is not None else 0,
            }
        )
    return rows
