"""Producers and readers: enqueue, list and search, one job, cancel, retry, bulk, stats, health."""

from __future__ import annotations

import logging
import math
import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response

from jobcore.storage.base import Inserted
from jobcore_http.auth import hub_of, require
from jobcore_http.authorize import caller, may_change, may_enqueue, may_filter
from jobcore_http.bulk import bulk_change
from jobcore_http.engine import settle
from jobcore_http.enqueue import build_job
from jobcore_http.errors import ApiError
from jobcore_http.hub import Hub
from jobcore_http.models import (
    BatchIn,
    BatchOut,
    BulkIn,
    BulkOut,
    EnqueueIn,
    ErrorOut,
    HealthOut,
    JobCreatedOut,
    JobDetailOut,
    JobListOut,
    JobOut,
    StatsOut,
)
from jobcore_http.responses import JSONResponse
from jobcore_http.store import MAX_QUERY_CHARS, JobFilter
from jobcore_http.tokens import Principal
from jobcore_http.views import attempts_detail, job_json, normalize_statuses, split_values

router = APIRouter(prefix="/api")
log = logging.getLogger("jobcore.http")

MAX_FILTER_NAMES = 1000
"""Job types (or queues) one filter may name."""

JobId = Annotated[str, Path(min_length=1, max_length=200)]
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut} for code in (400, 401, 403, 404, 409, 413, 422)
}


def created_json(item: Inserted) -> dict[str, Any]:
    return {**job_json(item.job), "created": item.created}


@router.post(
    "/jobs",
    status_code=201,
    response_model=JobCreatedOut,
    responses={
        200: {"model": JobCreatedOut, "description": "a duplicate: the existing job"},
        **ERRORS,
    },
    dependencies=[Depends(require("produce"))],
)
async def enqueue(
    request: Request,
    body: EnqueueIn,
    idempotency_key: Annotated[str | None, Header(max_length=1000)] = None,
) -> JSONResponse:
    """Enqueue one job; 201 when created, 200 with `created: false` for a duplicate key."""
    return await enqueue_one(hub_of(request), caller(request), body, idempotency_key)


async def enqueue_one(
    hub: Hub, principal: Principal, body: EnqueueIn, idempotency_key: str | None
) -> JSONResponse:
    """`POST /api/jobs` once its input is validated (the route's and the hot lane's)."""
    job = build_job(hub.queue, body, idempotency_key)
    may_enqueue(principal, [job])
    [item] = await settle(hub.engine.insert([job]))
    return JSONResponse(created_json(item), status_code=201 if item.created else 200)


@router.post(
    "/jobs/batch",
    status_code=201,
    response_model=BatchOut,
    responses=ERRORS,
    dependencies=[Depends(require("produce"))],
)
async def enqueue_batch(request: Request, body: BatchIn) -> JSONResponse:
    """Enqueue many jobs in one transaction: all or nothing."""
    return await enqueue_batch_of(hub_of(request), caller(request), body)


async def enqueue_batch_of(hub: Hub, principal: Principal, body: BatchIn) -> JSONResponse:
    """`POST /api/jobs/batch` once its input is validated (the route's and the hot lane's)."""
    jobs = []
    for index, item in enumerate(body.jobs):
        try:
            jobs.append(build_job(hub.queue, item))
        except ApiError as exc:
            raise ApiError(exc.status, f"jobs.{index}: {exc.message}") from None
        except Exception as exc:
            from jobcore.errors import JobcoreError

            if isinstance(exc, JobcoreError):
                exc.args = (f"jobs.{index}: {exc}",)
            raise
    may_enqueue(principal, jobs, "jobs.")
    inserted = await settle(hub.engine.insert(jobs))
    return JSONResponse({"jobs": [created_json(item) for item in inserted]}, status_code=201)


def _filter(
    status: list[str], type: list[str], queue: list[str], worker: str | None, q: str | None
) -> JobFilter:
    try:
        statuses = normalize_statuses(status)
    except ValueError as exc:
        raise ApiError(400, str(exc)) from None
    if q is not None and len(q) > MAX_QUERY_CHARS:
        raise ApiError(
            400, f"q is {len(q)} characters, over the limit of {MAX_QUERY_CHARS} for a search"
        )
    types, queues = split_values(type), split_values(queue)
    for what, names in (("type", types), ("queue", queues)):
        if len(names) > MAX_FILTER_NAMES:  # else the store's query fails (503)
            raise ApiError(
                400, f"{what}: at most {MAX_FILTER_NAMES} names in one filter, not {len(names)}"
            )
    return JobFilter(
        statuses=statuses,
        types=types,
        queues=queues,
        worker=worker or None,
        q=q or None,
    )


@router.get(
    "/jobs", response_model=JobListOut, responses=ERRORS, dependencies=[Depends(require("read"))]
)
def list_jobs(
    request: Request,
    status: Annotated[
        list[str], Query(description="status (aliases too), repeat or comma-separate")
    ] = [],  # noqa: B006
    type: Annotated[list[str], Query()] = [],  # noqa: B006
    queue: Annotated[list[str], Query()] = [],  # noqa: B006
    worker: Annotated[str | None, Query(max_length=200)] = None,
    q: Annotated[
        str | None,
        Query(description=f"search payloads and errors (up to {MAX_QUERY_CHARS} characters)"),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    cursor: Annotated[
        str | None, Query(max_length=200, description="next_cursor of the previous page")
    ] = None,
    offset: Annotated[
        int, Query(ge=0, le=100_000, description="skip this many (prefer cursor)")
    ] = 0,
) -> JSONResponse:
    """Jobs newest first, in keyset pages (`next_cursor`)."""
    hub = hub_of(request)
    where = _filter(status, type, queue, worker, q)
    page = hub.store.search_jobs(where, before=cursor, limit=offset + limit)
    jobs = page.jobs[offset:]
    return JSONResponse({"jobs": [job_json(job) for job in jobs], "next_cursor": page.next_cursor})


@router.get(
    "/jobs/{job_id}",
    response_model=JobDetailOut,
    responses=ERRORS,
    dependencies=[Depends(require("read"))],
)
def get_job(request: Request, job_id: JobId) -> JSONResponse:
    """One job with every attempt (`attempts_detail`)."""
    job = hub_of(request).queue.get(job_id)
    return JSONResponse({**job_json(job), "attempts_detail": attempts_detail(job)})


@router.delete(
    "/jobs/{job_id}",
    status_code=204,
    responses=ERRORS,
    dependencies=[Depends(require("produce"))],
)
def cancel_job(request: Request, job_id: JobId) -> Response:
    """Cancel: scheduled/pending end `cancelled`; a claimed job is asked to stop."""
    may_change(request, hub_of(request).queue, job_id, "cancel")
    hub_of(request).queue.cancel([job_id])
    return Response(status_code=204)


@router.post(
    "/jobs/{job_id}/retry",
    response_model=JobOut,
    responses=ERRORS,
    dependencies=[Depends(require("produce"))],
)
def retry_job(request: Request, job_id: JobId) -> JSONResponse:
    """A failed or cancelled job back to pending, attempts reset, history kept."""
    may_change(request, hub_of(request).queue, job_id, "retry")
    [job] = hub_of(request).queue.retry([job_id])
    return JSONResponse(job_json(job))


def _as_list(value: str | list[str] | None) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def _bulk(request: Request, body: BulkIn, action: str) -> dict[str, int]:
    where = _filter(
        _as_list(body.status), _as_list(body.type), _as_list(body.queue), body.worker, body.q
    )
    if where == JobFilter() and not body.all:  # `{}` must not mean every job by accident
        raise ApiError(
            400,
            "give at least one filter (status, type, queue, worker, q), "
            'or "all": true to act on every job',
        )
    may_filter(request, where)
    return bulk_change(hub_of(request), where, action)


@router.post(
    "/jobs/retry",
    response_model=BulkOut,
    responses=ERRORS,
    dependencies=[Depends(require("produce"))],
)
def bulk_retry(request: Request, body: BulkIn) -> dict[str, int]:
    """Retry every job the filters match (default statuses: failed and cancelled); at least
    one filter, or `"all": true`."""
    return _bulk(request, body, "retry")


@router.post(
    "/jobs/cancel",
    response_model=BulkOut,
    responses=ERRORS,
    dependencies=[Depends(require("produce"))],
)
def bulk_cancel(request: Request, body: BulkIn) -> dict[str, int]:
    """Cancel every job the filters match (default statuses: scheduled, pending and claimed);
    at least one filter, or `"all": true`."""
    return _bulk(request, body, "cancel")


@router.get(
    "/stats", response_model=StatsOut, responses=ERRORS, dependencies=[Depends(require("read"))]
)
def stats(request: Request) -> JSONResponse:
    """The `jobcore stats --json` object."""
    from jobcore.cli.admin import stats_json

    return JSONResponse(stats_json(hub_of(request).queue.stats()))


@router.get("/health", response_model=HealthOut, responses={503: {"model": HealthOut}})
def health(request: Request) -> JSONResponse:
    """200 when the store answers, else 503. Needs no token."""
    hub = hub_of(request)
    try:
        hub.store.ping()
        hub.storage.next_due()
    except Exception as exc:
        # anyone may ask: the detail (paths, hosts) goes to the log, not the answer
        _log_unhealthy(str(exc))
        return JSONResponse({"status": "unavailable"}, status_code=503)
    return JSONResponse({"status": "ok"})


_unhealthy: dict[str, float] = {}  # detail -> when last logged


def _log_unhealthy(detail: str) -> None:
    """Log why the store does not answer: each distinct detail once a minute at most."""
    now = time.monotonic()
    if now - _unhealthy.get(detail, -math.inf) >= 60:
        if len(_unhealthy) > 100:
            _unhealthy.clear()
        _unhealthy[detail] = now
        log.warning("health check: the store does not answer: %s", detail)
