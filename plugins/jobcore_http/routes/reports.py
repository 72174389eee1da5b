"""Batched reports: many outcomes and heartbeats of one agent in one request and one commit.

`POST /api/jobs/reports {worker_id, reports: [{job_id, lease_id, kind, ...}]}`.
Each item is fenced (lease AND worker) and idempotent exactly as its single
route (`/api/jobs/{id}/result|fail|release|heartbeat`); the items' writes are
handed to the engine together, so they commit in one transaction. Every item
is answered, in order: `recorded`, `already`, `stale` or `refused` (malformed
or not allowed; nothing of it is written). One bad item never refuses the others.

A `start` item (no single route) marks a read-ahead job started (claimed with
`start` below its count, DESIGN §6 crash accounting): `recorded` once that is
committed, so the agent runs its handler only then; a job whose cancel was
requested never starts (`refused` with `cancel_requested: true`: release it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import ValidationError

from jobcore.errors import JobcoreError
from jobcore.models import (
    Completed,
    Job,
    JobStatus,
    Lease,
    NewJob,
    Outcome,
    Released,
    compact_json,
)
from jobcore_http.auth import acting_as, hub_of
from jobcore_http.authorize import may_enqueue
from jobcore_http.engine import settle_all
from jobcore_http.enqueue import build_job
from jobcore_http.errors import ApiError
from jobcore_http.hub import MAX_RUNTIME_EXCEEDED, Hub
from jobcore_http.models import ReportIn, ReportsIn, ReportsOut
from jobcore_http.retries import failure_outcome, hold_limit
from jobcore_http.routes.agents import ERRORS, Agent
from jobcore_http.tokens import Principal
from jobcore_http.views import last_attempt

router = APIRouter(prefix="/api")

# how this lease's attempt ended when the same report was recorded before (a retryable fail
# or a release of a cancel-requested job ends it `cancelled`)
ENDED_AS = {
    "result": ("completed",),
    "fail": ("failed", "retrying", "cancelled"),
    "release": ("released", "cancelled"),
}


@dataclass
class _Item:
    index: int
    report: ReportIn
    answer: dict[str, Any] | None = None  # set once decided
    outcome: Outcome | None = None  # handed to the engine
    beat: bool = False  # a lease extension handed to the engine
    start: bool = False  # a start marker handed to the engine
    hold: float | None = None  # seconds its rate limit is held (RetryAfter(limit=True))


@router.post("/jobs/reports", response_model=ReportsOut, responses=ERRORS)
async def reports(request: Request, body: ReportsIn, principal: Agent) -> dict[str, Any]:
    """Record many results, failures, releases, heartbeats and starts of one agent in one
    commit.

    Each item is answered in order: `recorded`, `already` (the same report of this lease
    was recorded before), `stale` (not this agent's live claim; nothing changed) or
    `refused` with `error` (malformed or not allowed; nothing of it written). A `start`
    answered `recorded` is durable: the read-ahead job's handler may begin.
    """
    return await record_reports(hub_of(request), principal, body)


async def record_reports(hub: Hub, principal: Principal, body: ReportsIn) -> dict[str, Any]:
    """The route's work, also run by the hot lane (`jobcore_http.hotlane`): every item
    answered in `ReportOut`'s full shape, so both paths send the same JSON."""
    acting_as(principal, body.worker_id)
    worker = body.worker_id
    hub.registry.seen(worker, hub.now())
    answers: list[dict[str, Any]] = [{}] * len(body.reports)
    items: list[_Item] = []
    for index, raw in enumerate(body.reports):
        try:
            items.append(_Item(index, ReportIn.model_validate(raw)))
        except ValidationError as exc:
            answers[index] = _refused(raw, f"reports.{index}: {_first_error(exc)}")
    fails = [item for item in items if item.report.kind == "fail"]
    jobs = await run_in_threadpool(_read, hub, [item.report.job_id for item in fails])
    for item in items:
        _decide(hub, principal, worker, item, jobs)
    holds = [(item.report.job_id, item.hold) for item in items if item.hold is not None]
    for job_id, seconds in holds:  # before the retry is recorded: none of it is claimed
        await run_in_threadpool(hold_limit, hub.queue, job_id, seconds)
    outcomes = [item for item in items if item.outcome is not None]
    beats = [item for item in items if item.beat]
    starts = [item for item in items if item.start]
    recorded, extended, begun = hub.engine.together(
        [item.outcome for item in outcomes if item.outcome is not None],
        [_lease(item.report, worker) for item in beats],
        [_lease(item.report, worker) for item in starts],
    )
    answered: list[Any] = await settle_all([*recorded, *extended, *begun])
    done_as, cancels = answered[: len(recorded)], answered[len(recorded) :][: len(extended)]
    for item, done in zip(outcomes, done_as, strict=True):
        if done.state != "stale":
            item.answer = _state(item.report, done.state)
    for item, cancel in zip(beats, cancels, strict=True):
        if cancel is not None:
            item.answer = {**_state(item.report, "recorded"), "cancel_requested": cancel}
            if item.report.progress is not None:
                hub.registry.progress[item.report.job_id] = item.report.progress
    for item, begun_as in zip(starts, answered[len(recorded) + len(extended) :], strict=True):
        item.answer = _started(item, begun_as)
    undecided = [item for item in items if item.answer is None]
    if undecided:  # refused by the fence: a repeat of what was recorded, or stale
        now = await run_in_threadpool(_read, hub, [item.report.job_id for item in undecided])
        for item in undecided:
            item.answer = _after_the_fact(item.report, worker, now.get(item.report.job_id))
    for item in items:
        assert item.answer is not None
        answers[item.index] = item.answer
    results = [{"error": None, "cancel_requested": None, **answer} for answer in answers]
    return {"results": results, "drain": worker in hub.registry.draining}


def _lease(report: ReportIn, worker: str) -> Lease:
    return Lease(report.job_id, report.lease_id, worker)


def _read(hub: Hub, job_ids: Sequence[str]) -> dict[str, Job]:
    jobs: dict[str, Job] = {}
    for job_id in dict.fromkeys(job_ids):
        job = hub.queue.storage.get(job_id)
        if job is not None:
            jobs[job_id] = job
    return jobs


def _decide(hub: Hub, principal: Principal, worker: str, item: _Item, jobs: dict[str, Job]) -> None:
    """What to hand the engine for `item` (or its answer, when it is refused or cannot apply)."""
    report = item.report
    lease = _lease(report, worker)
    try:
        if report.kind == "result":
            item.outcome = Completed(lease, report.result, _children(hub, principal, report))
        elif report.kind == "release":
            item.outcome = Released(lease)
        elif report.kind == "heartbeat":
            item.beat = True
        elif report.kind == "start":
            item.start = True
        else:
            job = jobs.get(report.job_id)
            if job is not None and _live(job, worker, report.lease_id):
                item.outcome = _failure(hub, job, report)
                if report.retryable:
                    item.hold = report.hold_limit
    except ApiError as exc:
        item.answer = _refused({"job_id": report.job_id}, f"reports.{item.index}: {exc}")


def _children(hub: Hub, principal: Principal, report: ReportIn) -> tuple[NewJob, ...]:
    """The result's size checked and its children built and allowed, as the result route does."""
    size = len(compact_json(report.result))
    limit = hub.queue.config.core.max_result_bytes
    if size > limit:
        raise ApiError(
            413, f"result is {size} bytes, over the {limit}-byte limit (max_result_bytes)"
        )
    children: list[NewJob] = []
    for index, child in enumerate(report.children or ()):
        try:
            children.append(build_job(hub.queue, child, parent_id=report.job_id))
        except (ApiError, JobcoreError) as exc:
            raise ApiError(400, f"children.{index}: {exc}") from None
    may_enqueue(principal, children, "children.")
    return tuple(children)


def _failure(hub: Hub, job: Job, report: ReportIn) -> Outcome:
    """The retry policy's decision for a failed attempt, as the fail route makes it."""
    return failure_outcome(
        hub.queue, job, report.reason, retryable=report.retryable, retry_in=report.retry_in
    )


def _started(item: _Item, begun: str | None) -> dict[str, Any]:
    """The answer to a `start` item: `recorded` (durable; run it), `stale` (not this agent's
    live claim), or `refused` with `cancel_requested` (cancelled before it began)."""
    report = item.report
    if begun == "started":
        return _state(report, "recorded")
    if begun == "cancelled":
        return {
            **_refused(
                {"job_id": report.job_id},
                f"reports.{item.index}: job {report.job_id} was cancelled before it began; "
                "it does not start (release it)",
            ),
            "cancel_requested": True,
        }
    return _state(report, "stale")


def _live(job: Job, worker: str, lease_id: str) -> bool:
    return job.status is JobStatus.CLAIMED and job.locked_by == worker and job.lease_id == lease_id


def _after_the_fact(report: ReportIn, worker: str, job: Job | None) -> dict[str, Any]:
    """A report the fence refused: `already` when this lease ended this way, else `stale`."""
    attempt = None if job is None else last_attempt(job, worker, report.lease_id)
    if attempt is None:
        return _state(report, "stale")
    if report.kind == "heartbeat":
        ended = str(attempt.get("error")).startswith(MAX_RUNTIME_EXCEEDED) or (
            attempt.get("outcome") == "cancelled"
        )
        return (
            {**_state(report, "stale"), "cancel_requested": True}
            if ended
            else _state(report, "stale")
        )
    if attempt.get("outcome") not in ENDED_AS[report.kind]:
        return _state(report, "stale")
    if report.kind == "fail" and attempt.get("error") != report.reason:
        return _state(report, "stale")
    if report.kind == "result" and (job is None or job.status is not JobStatus.COMPLETED):
        return _state(report, "stale")
    return _state(report, "already")


def _state(report: ReportIn, state: str) -> dict[str, Any]:
    return {"job_id": report.job_id, "state": state}


def _refused(raw: Any, error: str) -> dict[str, Any]:
    job_id = raw.get("job_id") if isinstance(raw, dict) else None
    return {"job_id": job_id if isinstance(job_id, str) else "", "state": "refused", "error": error}


def _first_error(exc: ValidationError) -> str:
    errors = exc.errors()
    if not errors:
        return str(exc)
    first = errors[0]
    where = ".".join(str(part) for part in first.get("loc", ()))
    message = str(first.get("msg")).removeprefix("Value error, ")  # as the other routes say it
    text = f"{where}: {message}" if where else message
    more = len(errors) - 1
    return text + (f" (and {more} more problem{'s' * (more > 1)})" if more else "")
