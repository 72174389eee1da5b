"""Recurring jobs in `jobcore stats`, `GET /api/stats` and the OpenTelemetry metrics.

Read from the store only, so every process tells the same: a schedule is
*overdue* when its oldest scheduled time no scheduler has dealt with (above its
high-water mark) is more than its `grace` in the past. That covers every way a
schedule stops: no worker or hub running, a pass that keeps failing (its
transaction rolls back, the mark stays), a job type no process registers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jobcore import Queue
from jobcore.cli.output import table
from jobcore.storage.base import StatsSection
from jobcore.timeutil import iso
from jobcore_cron.spec import Schedule
from jobcore_cron.store import Run, State, read_latest

KEY = "schedules"
HEALTH = ("ok", "overdue", "failed", "not_started")  # `failed`: its last run's job failed


def lags(
    found: Sequence[Schedule], recorded: dict[str, tuple[State, Run | None]], now: int
) -> dict[str, tuple[int | None, int]]:
    """Per schedule: its oldest scheduled time not dealt with yet if it is due (else None),
    and how long ago that was (ms, 0 when none is due). A schedule no scheduler recorded
    yet has none due: its first run is its first time after a scheduler first sees it."""
    found_lags: dict[str, tuple[int | None, int]] = {}
    for item in found:
        seen = recorded.get(item.name, (None, None))[0]
        due = next(iter(item.timing.times_after(seen.last_at))) if seen is not None else None
        if due is None or due > now:
            found_lags[item.name] = (None, 0)
        else:
            found_lags[item.name] = (due, now - due)
    return found_lags


def rows(queue: Queue, found: Sequence[Schedule]) -> list[dict[str, Any]]:
    """`jobcore schedules --json`'s rows, each with `due_at` (the oldest time no scheduler
    has dealt with, when due), `lag_seconds` and `health` (one of `HEALTH`)."""
    from jobcore_cron.commands import describe

    if not found:
        return []
    recorded = read_latest(queue.storage, queue.transaction)
    described = describe(queue, list(found), recorded)
    return annotate(found, described, recorded, queue.storage.now())


def annotate(
    found: Sequence[Schedule],
    described: list[dict[str, Any]],
    recorded: dict[str, tuple[State, Run | None]],
    now: int,
) -> list[dict[str, Any]]:
    """Add `due_at`, `lag_seconds` and `health` to `describe`'s rows (in `found`'s order)."""
    late = lags(found, recorded, now)
    for item, row in zip(found, described, strict=True):
        due, lag = late[item.name]
        last = row["last_job"]
        if lag > item.grace_ms:
            health = "overdue"
        elif last is not None and last["status"] == "failed":
            health = "failed"
        elif item.name not in recorded:
            health = "not_started"
        else:
            health = "ok"
        row.update(due_at=iso(due) if due is not None else None, lag_seconds=lag / 1000)
        row["health"] = health
    return described


def section(queue: Queue, found: Sequence[Schedule]) -> StatsSection:
    """The `schedules` part of `jobcore stats`."""
    listed = rows(queue, found)
    title = "Recurring jobs (`jobcore schedules` has more; overdue: no scheduler ran it):"
    body = (
        table(
            [
                [
                    row["name"],
                    row["type"],
                    row["policy"],
                    row["next_run_at"],
                    row["last_run_at"] or "never",
                    _health_cell(row),
                ]
                for row in listed
            ],
            ["NAME", "TYPE", "POLICY", "NEXT", "LAST", "HEALTH"],
        )
        if listed
        else "  none"
    )
    return StatsSection(KEY, listed, f"{title}\n{body}")


def _health_cell(row: dict[str, Any]) -> str:
    if row["health"] == "overdue":
        return f"OVERDUE since {row['due_at']}"
    if row["health"] == "failed":
        return f"last run failed ({row['last_job']['id']})"
    return str(row["health"]).replace("_", " ")


def gauges(queue: Queue, found: Sequence[Schedule]) -> list[dict[str, Any]]:
    """`{name, overdue, lag_seconds, runs}` per schedule for the metrics: one read of the
    schedules' table, no job looked up."""
    if not found:
        return []
    recorded = read_latest(queue.storage, queue.transaction)
    late = lags(found, recorded, queue.storage.now())
    return [
        {
            "name": item.name,
            "overdue": late[item.name][1] > item.grace_ms,
            "lag_seconds": late[item.name][1] / 1000,
            "runs": recorded[item.name][0].runs if item.name in recorded else 0,
        }
        for item in found
    ]
