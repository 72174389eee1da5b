"""The dashboard's pages: overview, jobs, one job, workers, dead letters."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from jobcore import operating
from jobcore.errors import JobNotFound
from jobcore.rates import format_period
from jobcore_http.dashboard.access import Viewer
from jobcore_http.dashboard.charts import bar_chart, series
from jobcore_http.dashboard.filters import (
    CANCELLABLE,
    PAGE_SIZES,
    RETRYABLE,
    STATUSES,
    BadFilter,
    JobFilter,
)
from jobcore_http.dashboard.job_view import attempts, ms_of, timeline, timeline_svg
from jobcore_http.dashboard.overview import UNFINISHED, Counts, History, by
from jobcore_http.dashboard.render import duration, page
from jobcore_http.dashboard.session import Session
from jobcore_http.dashboard.state import dashboard
from jobcore_http.dashboard.workers import worker_rows
from jobcore_http.schedules import listing

router = APIRouter(include_in_schema=False)

NOTICES = {
    "retry": "Retried {n} job(s).",
    "cancel": "Cancelled {n} job(s) (claimed ones stop when their worker sees the request).",
    "paused": "Paused: no worker or agent claims its jobs until it is resumed.",
    "resumed": "Resumed: its waiting jobs are claimed again.",
}


def notice_of(request: Request) -> str | None:
    """The message of a finished action, from the redirect's `done`/`n` parameters."""
    done, count = request.query_params.get("done"), request.query_params.get("n", "0")
    if done not in NOTICES or not (count.isascii() and count.isdecimal()):
        return None
    return NOTICES[done].format(n=count)


def error_page(
    request: Request,
    session: Session | None,
    status: int,
    heading: str,
    message: str,
    back: str = "/",
) -> HTMLResponse:
    return page(
        request,
        "error.html",
        {"session": session, "heading": heading, "message": message, "back": back},
        status_code=status,
    )


@dataclass(frozen=True, slots=True)
class QueueRow:
    """A queue's jobs by status, its depth (unfinished jobs) and its oldest pending job."""

    name: str
    counts: dict[str, int]
    oldest: int | None
    width: int = 0  # the depth bar, in percent of the deepest queue

    @property
    def depth(self) -> int:
        return sum(self.counts.get(status, 0) for status in UNFINISHED)


def queue_rows(counts: Counts, finished: History) -> list[QueueRow]:
    """Every queue with jobs, deepest first."""
    rows = [
        QueueRow(name, per_status, counts.oldest_pending.get(name))
        for name, per_status in by({**counts.unfinished, **finished.finished}, 2).items()
    ]
    deepest = max((row.depth for row in rows), default=0) or 1
    rows = [replace(row, width=round(100 * row.depth / deepest)) for row in rows]
    return sorted(rows, key=lambda row: (-row.depth, row.name))


@router.get("/", response_class=HTMLResponse)
def overview(request: Request, session: Viewer) -> HTMLResponse:
    dash = dashboard(request)
    now = dash.now()
    counts = dash.counts.get()
    past = dash.history.peek()
    finished = past.value if past is not None else History()
    stuck = dash.reader.stuck_count(now)
    types = by({**counts.value.unfinished, **finished.finished}, 1)
    return page(
        request,
        "overview.html",
        {
            "session": session,
            "active": "overview",
            "live": True,
            "notice": notice_of(request),
            "statuses": STATUSES,
            "counts": counts.value,
            "counted": None if counts.current else _age(counts.taken_at, now),
            "history": past,
            "history_age": None if past is None else _age(past.taken_at, now),
            "stuck": stuck,
            "queues": queue_rows(counts.value, finished),
            "paused": dash.queue.storage.pauses(),  # DESIGN §16
            "schedules": listing(dash.queue, dash.reader.rows),  # plugin cron, if loaded
            "limits": [_with_rate_text(row) for row in operating.limit_rows(dash.queue)],
            "types": sorted(types.items()),
            "hour_chart": bar_chart(
                series(finished, now, bars=60, minutes_per_bar=1),
                title="Finished per minute, last hour",
                span_label="60 min ago",
                chart_id="chart-hour",
            ),
            "day_chart": bar_chart(
                series(finished, now, bars=48, minutes_per_bar=30),
                title="Finished per 30 minutes, last day",
                span_label="24 h ago",
                chart_id="chart-day",
            ),
        },
    )


def _age(taken_at: int, now: int) -> str:
    return duration(max(now - taken_at, 0))


def _limit(request: Request) -> int:
    raw = request.query_params.get("limit", "50")
    # isdecimal() and isascii(): "²" is a digit that int() refuses
    return int(raw) if raw.isascii() and raw.isdecimal() and int(raw) in PAGE_SIZES else 50


@router.get("/ui/jobs", response_class=HTMLResponse)
def jobs(request: Request, session: Viewer) -> Response:
    dash = dashboard(request)
    try:
        flt = JobFilter.from_params(request.query_params)
    except BadFilter as exc:
        return error_page(request, session, 400, "Bad filter", str(exc), "/ui/jobs")
    cursor = request.query_params.get("cursor") or None
    limit = _limit(request)
    if flt.q and not cursor and dash.queue.storage.get(flt.q) is not None:
        return RedirectResponse(f"/ui/jobs/{quote(flt.q, safe='')}", status_code=303)
    found = dash.store.search_jobs(flt.for_hub(), before=cursor, limit=limit, budget_ms=150)
    past = dash.history.peek()
    seen = {**dash.counts.get().value.unfinished, **(past.value.finished if past else {})}
    return page(
        request,
        "jobs.html",
        {
            "session": session,
            "active": "jobs",
            "live": True,
            "notice": notice_of(request),
            "statuses": STATUSES,
            "retryable": RETRYABLE,
            "cancellable": CANCELLABLE,
            "page_sizes": PAGE_SIZES,
            "flt": flt,
            "cursor": cursor,
            "limit": limit,
            "page": found,
            "cut_short": found.next_cursor is not None and len(found.jobs) < limit,
            "known_types": sorted(by(seen, 1)),
            "known_queues": sorted(by(seen, 2)),
        },
    )


@router.get("/ui/jobs/{job_id}", response_class=HTMLResponse)
def job(request: Request, job_id: str, session: Viewer) -> HTMLResponse:
    dash = dashboard(request)
    try:
        found = dash.queue.get(job_id)
    except JobNotFound:
        return error_page(
            request, session, 404, "No such job", f"There is no job with id {job_id!r}.", "/ui/jobs"
        )
    tries = attempts(found)
    return page(
        request,
        "job.html",
        {
            "session": session,
            "active": "jobs",
            "live": True,
            "notice": notice_of(request),
            "job": found,
            "attempts": tries,
            "timeline": timeline(found, tries),
            "timeline_svg": timeline_svg(found, tries, dash.now()),
            "retryable": RETRYABLE,
            "cancellable": CANCELLABLE,
        },
    )


@router.get("/ui/workers", response_class=HTMLResponse)
def workers(request: Request, session: Viewer) -> HTMLResponse:
    dash = dashboard(request)
    now = dash.now()
    claims = dash.reader.claims()
    seen = dash.history.peek()
    rows = worker_rows(
        claims,
        seen.value.workers_seen if seen is not None else {},
        getattr(request.app.state, "workers", None),
        now,
    )
    stuck = dash.reader.stuck(now)
    return page(
        request,
        "workers.html",
        {
            "session": session,
            "active": "workers",
            "live": True,
            "workers": rows,
            "stuck": stuck,
            "now": now,
        },
    )


@router.get("/ui/dead-letters", response_class=HTMLResponse)
def dead_letters(request: Request, session: Viewer) -> HTMLResponse:
    grouped = dashboard(request).dead_letters.peek()  # None while the first grouping runs
    groups = [
        {**group, "last_ms": ms_of(group.get("last_failed_at"))}
        for group in (grouped.value if grouped is not None else [])
    ]
    return page(
        request,
        "dead_letters.html",
        {
            "session": session,
            "active": "dead",
            "live": True,
            "groups": groups,
            "grouping": grouped is None,
            "notice": notice_of(request),
        },
    )


def _with_rate_text(row: dict[str, Any]) -> dict[str, Any]:
    """A limit row with its rate as `50/1m` (rate limits, DESIGN §16)."""
    if row.get("rate") is None:
        return row
    return {**row, "rate_text": f"{row['rate']}/{format_period(round(row['period'] * 1000))}"}
