"""Operator commands: stats, sweep, prune, reconcile, plugins."""

from __future__ import annotations

from typing import Any

import click

from jobcore.cli import CliState, cli, pass_state
from jobcore.cli.output import emit_json, job_rows, short, table
from jobcore.cli.params import DURATION, TEXT
from jobcore.clockjump import confirm_wait
from jobcore.models import JobStatus
from jobcore.plugins import PluginInfo
from jobcore.storage.base import Stats

STATUS_ORDER = [status.value for status in JobStatus]


def stats_json(stats: Stats) -> dict[str, Any]:
    return {
        "counts": {status: stats.counts.get(status, 0) for status in STATUS_ORDER},
        "by_type": stats.by_type,
        "failures": stats.failures,
        "stuck": [job.to_json() for job in stats.stuck],
        "durations": stats.durations,
        "last_hour": stats.last_hour,
        "duplicates": stats.duplicates,
        "paused": [pause.to_json() for pause in stats.paused],  # DESIGN §16
        "limits": stats.limits,
        **{section.key: section.data for section in stats.sections},  # plugins' (`jobcore_stats`)
    }


def stats_text(stats: Stats) -> str:
    parts = []
    # -- paused queues and types first, plainly (DESIGN §16)
    for pause in stats.paused:
        why = f": {pause.reason}" if pause.reason else ""
        since = pause.to_json()["since"]
        parts.append(f"PAUSED {pause.kind} {pause.name} since {since} by {pause.by}{why}")
    if stats.paused:
        parts.append("(`jobcore resume` lets workers claim them again)\n")
    # -- end paused
    parts.append("Jobs by type and status:")
    rows = [
        [type_name, *(counts.get(status, 0) for status in STATUS_ORDER)]
        for type_name, counts in sorted(stats.by_type.items())
    ]
    rows.append(["(all)", *(stats.counts.get(status, 0) for status in STATUS_ORDER)])
    parts.append(table(rows, ["TYPE", *STATUS_ORDER]))
    parts.append("\nFailures (why jobs ended failed):")
    parts.append(
        table(
            [(f["type"], f["count"], short(f["error"], 80)) for f in stats.failures],
            ["TYPE", "COUNT", "ERROR"],
        )
        if stats.failures
        else "  none"
    )
    caps = [r for r in stats.limits if r["concurrency"] is not None]
    rated = [r for r in stats.limits if r["concurrency"] is None]
    if caps:
        parts.append("\nConcurrency limits (claimed now / at most; key limits: keys full):")
        parts.append(
            table(
                [(r["scope"], r["name"], r["held"], r["concurrency"]) for r in caps],
                ["SCOPE", "NAME", "CLAIMED", "LIMIT"],
            )
        )
    if rated:
        parts.append("\nRate limits (started in the window / at most; key limits: keys full):")
        parts.append(
            table(
                [
                    (
                        r["scope"],
                        r["name"],
                        r["used"],
                        r["rate"],
                        f"{r['period']:g}s",
                        r["held_until"],
                    )
                    for r in rated
                ],
                ["SCOPE", "NAME", "STARTED", "RATE", "PERIOD", "HELD UNTIL"],
            )
        )
    parts.extend(f"\n{section.text}" for section in stats.sections)
    parts.append("\nStuck (claimed, lease expired; `jobcore sweep` reclaims them):")
    parts.append(job_rows(stats.stuck) if stats.stuck else "  none")
    parts.append("\nDurations of completed jobs, last 24h (ms):")
    parts.append(
        table(
            [(t, d["count"], d["p50_ms"], d["p95_ms"]) for t, d in stats.durations.items()],
            ["TYPE", "COUNT", "P50", "P95"],
        )
        if stats.durations
        else "  none"
    )
    hour = stats.last_hour
    parts.append(
        f"\nLast hour: {hour['enqueued']} enqueued, {hour['completed']} completed, "
        f"{hour['failed']} failed"
    )
    parts.append("\nDuplicate idempotency keys:")
    parts.append(
        table(
            [(d["type"], d["idempotency_key"], d["count"]) for d in stats.duplicates],
            ["TYPE", "KEY", "COUNT"],
        )
        if stats.duplicates
        else "  none"
    )
    return "\n".join(parts)


@cli.command()
@click.option("--json", "as_json", is_flag=True)
@pass_state
def stats(state: CliState, as_json: bool) -> None:
    """Outstanding work, failures and why, stuck jobs, durations, last hour, duplicates."""
    result = state.queue(create=False).stats()
    if as_json:
        emit_json(stats_json(result))
    else:
        click.echo(stats_text(result))


@cli.command()
@click.option("--json", "as_json", is_flag=True)
@pass_state
def sweep(state: CliState, as_json: bool) -> None:
    """Reclaim jobs whose lease expired (their worker died), confirmed over lease/4 + 1s."""
    confirm = confirm_wait(state.config.core.lease)  # a live worker's keeper extends by then
    swept = state.queue(create=False).sweep(force=True, confirm=confirm)
    if as_json:
        emit_json([{"action": item.action, "job": item.job.to_json()} for item in swept])
        return
    for item in swept:
        click.echo(f"{item.action} {item.job.id} ({item.job.type}, attempt {item.job.attempts})")
    click.echo(f"swept {len(swept)} job(s)", err=True)


@cli.command()
@click.option(
    "--older-than",
    "older_than",
    required=True,
    type=DURATION,
    help="Age of finished jobs to delete, e.g. 30d.",
)
@pass_state
def prune(state: CliState, older_than: float) -> None:
    """Delete completed, failed and cancelled jobs that finished longer ago than --older-than."""
    deleted = state.queue(create=False).prune(older_than)
    click.echo(f"deleted {deleted} job(s)")


@cli.command()
@click.option("--type", "types", multiple=True, type=TEXT, help="Only this type (repeatable).")
@click.option("--json", "as_json", is_flag=True)
@pass_state
def reconcile(state: CliState, types: tuple[str, ...], as_json: bool) -> None:
    """Compare completed jobs with the world through plugins; fix nothing; exit 1 if any differ."""
    found = list(state.queue(create=False).reconcile(types))
    if as_json:
        emit_json([{"job": job.to_json(), "discrepancies": problems} for job, problems in found])
    else:
        for job, problems in found:
            for problem in problems:
                click.echo(f"{job.id} {job.type}: {problem}")
        click.echo(f"{len(found)} job(s) with discrepancies", err=True)
    if found:
        raise SystemExit(1)


def plugin_infos(state: CliState) -> list[PluginInfo]:
    queue = state.queue(create=False)  # registers job types; opens no database
    pm = state.pm
    infos = []
    for name, info in pm.infos.items():
        if info.status == "loaded":
            info.job_types = queue.registry.names_by_plugin(name)
            info.hooks = pm.hooks_of(name)
        infos.append(info)
    return infos


@cli.command()
@click.option("--json", "as_json", is_flag=True)
@pass_state
def plugins(state: CliState, as_json: bool) -> None:
    """Loaded plugins with their job types and hooks; unavailable ones and why."""
    infos = plugin_infos(state)
    if as_json:
        emit_json([info.to_json() for info in infos])
        return
    rows = [
        (
            info.name,
            info.version or "",
            info.status,
            ", ".join(info.job_types),
            info.reason or ", ".join(h.removeprefix("jobcore_") for h in info.hooks),
        )
        for info in infos
    ]
    click.echo(table(rows, ["NAME", "VERSION", "STATUS", "JOB TYPES", "HOOKS / REASON"]))
