"""Rendering jobs and tables for the terminal, and JSON for scripts (stdout only)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click

from jobcore.models import Job
from jobcore.timeutil import iso


def emit_json(document: Any) -> None:
    """Print exactly one JSON document on stdout."""
    click.echo(json.dumps(document, indent=2, default=str))


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    cells = [[str(h) for h in headers]] + [
        ["" if c is None else str(c) for c in row] for row in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in cells
    ]
    return "\n".join(lines)


def short(text: str | None, width: int = 60) -> str:
    if not text:
        return ""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def job_rows(jobs: Sequence[Job]) -> str:
    rows = [
        (
            job.id,
            job.status,
            job.type,
            job.queue,
            f"{job.attempts}/{job.max_attempts}",
            iso(job.created_at),
            short(job.last_error, 50),
        )
        for job in jobs
    ]
    return table(rows, ("ID", "STATUS", "TYPE", "QUEUE", "ATTEMPTS", "CREATED", "LAST ERROR"))


def job_detail(job: Job) -> str:
    data = job.to_json()
    lines = []
    for key in (
        "id",
        "type",
        "queue",
        "status",
        "priority",
        "attempts",
        "max_attempts",
        "timeout",
        "idempotency_key",
        "parent_id",
        "run_at",
        "created_at",
        "claimed_at",
        "completed_at",
        "updated_at",
        "locked_by",
        "lease_expires_at",
        "cancel_requested",
        "last_error",
    ):
        value = data[key]
        if value is not None and value is not False:
            lines.append(f"{key + ':':<18}{value}")
    lines.append(f"{'payload:':<18}{json.dumps(job.payload)}")
    if job.meta:
        lines.append(f"{'meta:':<18}{json.dumps(job.meta)}")
    if job.result is not None:
        lines.append(f"{'result:':<18}{json.dumps(job.result)}")
    if job.errors:
        lines.append("errors:")
        for entry in data["errors"]:
            lines.append(
                f"  attempt {entry.get('attempt')} at {entry.get('at')} on {entry.get('worker')}: "
                f"{entry.get('error')}"
            )
    return "\n".join(lines)
