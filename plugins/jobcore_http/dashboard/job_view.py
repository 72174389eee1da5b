"""One job's attempts and timeline, from the store's attempt history."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from markupsafe import Markup, escape

from jobcore.models import Job, JobStatus
from jobcore.timeutil import parse_time


@dataclass(frozen=True, slots=True)
class Attempt:
    attempt: int
    worker: str | None
    started_at: int | None
    ended_at: int | None
    outcome: str
    error: str | None

    @property
    def duration_ms(self) -> int | None:
        if self.started_at is None or self.ended_at is None:
            return None
        return max(self.ended_at - self.started_at, 0)


@dataclass(frozen=True, slots=True)
class Moment:
    at: int
    kind: str
    label: str
    detail: str | None = None


def ms_of(value: Any) -> int | None:
    """Milliseconds from a stored time: ms as a number, or ISO-8601 text; None otherwise."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return int(value)
    try:
        return parse_time(str(value))
    except ValueError:
        return None


def attempts(job: Job) -> list[Attempt]:
    """Every attempt, oldest first, from the store's attempt history (`Job.attempts_detail`)."""
    return [
        Attempt(
            attempt=int(entry.get("attempt") or 0),
            worker=entry.get("worker"),
            started_at=ms_of(entry.get("started_at")),
            ended_at=ms_of(entry.get("ended_at")),
            outcome=str(entry.get("outcome") or "running"),
            error=entry.get("error"),
        )
        for entry in job.attempts_detail()
    ]


def timeline(job: Job, tries: list[Attempt]) -> list[Moment]:
    """What happened to the job, in order."""
    moments = [Moment(job.created_at, "created", f"enqueued on queue {job.queue}")]
    if job.run_at > job.created_at + 1000 and not tries:
        moments.append(Moment(job.run_at, "due", "due to run"))
    for item in tries:
        where = f" on {item.worker}" if item.worker else ""
        if item.started_at is not None:
            moments.append(
                Moment(item.started_at, "started", f"attempt {item.attempt} started{where}")
            )
        if item.ended_at is not None:
            moments.append(
                Moment(
                    item.ended_at,
                    item.outcome,
                    f"attempt {item.attempt} {item.outcome}{where}",
                    item.error,
                )
            )
    if job.status is JobStatus.CANCELLED and not any(m.kind == "cancelled" for m in moments):
        moments.append(Moment(job.completed_at or job.updated_at, "cancelled", "cancelled"))
    moments.sort(key=lambda m: m.at)
    return moments


_COLOURS = {"completed": "done", "running": "running", "cancelled": "cancelled"}


def timeline_svg(job: Job, tries: list[Attempt], now: int) -> Markup:
    """A bar from enqueue to the end (or now) with one segment per attempt."""
    start = job.created_at
    end = max([job.completed_at or now, *(t.ended_at or now for t in tries), start + 1])
    span = end - start
    width, height = 600, 28
    parts = [
        f'<svg class="chart timeline-bar" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="Timeline of {len(tries)} attempt(s)" preserveAspectRatio="none">',
        f'<rect class="wait" x="0" y="10" width="{width}" height="8"/>',
    ]
    for item in tries:
        if item.started_at is None:
            continue
        x = width * (item.started_at - start) / span
        w = max(width * ((item.ended_at or now) - item.started_at) / span, 2)
        cls = _COLOURS.get(item.outcome, "failed")
        parts.append(
            f'<rect class="{cls}" x="{x:.1f}" y="4" width="{w:.1f}" height="20">'
            f"<title>attempt {item.attempt}: {escape(item.outcome)}</title></rect>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))
