"""The simple JSON queue's three routes: add, claim next, complete or fail."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request, Response

from jobcore.models import Completed, Failed, Job, JobStatus, Lease, Outcome, compact_json
from jobcore_http.auth import agent_id_of, hub_of, require
from jobcore_http.authorize import caller, claimable, may_enqueue
from jobcore_http.engine import settle
from jobcore_http.errors import ApiError
from jobcore_http.hub import Hub
from jobcore_http.models import (
    ErrorOut,
    QueueAddIn,
    QueueAddOut,
    QueueJobOut,
    QueueUpdateIn,
    SuccessOut,
)
from jobcore_http.responses import JSONResponse
from jobcore_http.tokens import Principal

router = APIRouter(prefix="/api/queue")

WRAPPED = "jobcore_http.queue_data"
"""`meta` key marking a payload that wraps a non-object `data` of the JSON queue."""


def queue_data(job: Job) -> Any:
    """The JSON queue's `data` of a job: its payload, unwrapped if `add` wrapped it."""
    return job.payload.get("data") if job.meta.get(WRAPPED) is True else job.payload


ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut} for code in (400, 401, 403, 404, 409, 413, 422)
}


@router.post(
    "",
    status_code=201,
    response_model=QueueAddOut,
    responses=ERRORS,
    dependencies=[Depends(require("produce"))],
)
async def add(request: Request, body: QueueAddIn) -> JSONResponse:
    """Add a job `{type, data}`; answers `{id, status}`.

    `data` may be any JSON value, as in the JSON queue: a value that is not an
    object is stored as the payload `{"data": value}`, marked in `meta`, and
    handed back as it came by `GET /api/queue`.
    """
    hub = hub_of(request)
    if isinstance(body.data, dict):
        job = hub.queue.build(body.type, body.data)
    else:
        job = hub.queue.build(body.type, {"data": body.data}, meta={WRAPPED: True})
    may_enqueue(caller(request), [job])
    [item] = await settle(hub.engine.insert([job]))
    return JSONResponse({"id": item.job.id, "status": str(item.job.status)}, status_code=201)


@router.get(
    "",
    response_model=QueueJobOut,
    responses={204: {"description": "no job is waiting"}, **ERRORS},
)
async def next_job(
    request: Request, principal: Annotated[Principal, Depends(require("agent"))]
) -> Response:
    """Claim the next job (as the token's agent); 204 when none is waiting."""
    return await next_job_for(hub_of(request), principal)


async def next_job_for(hub: Hub, principal: Principal) -> Response:
    """`GET /api/queue` for a caller already authenticated (the route's and the hot lane's)."""
    worker = agent_id_of(principal)
    hub.registry.seen(worker, hub.now())
    types, queues = claimable(principal, (), ())
    pending = hub.engine.claim(worker, 1, queues, types, 0)
    jobs = await settle(pending.future)
    if not jobs:
        return Response(status_code=204)
    job = jobs[0]
    return JSONResponse({"id": job.id, "type": job.type, "data": queue_data(job)})


@router.put("/{job_id}", response_model=SuccessOut, responses=ERRORS)
async def update(
    request: Request,
    job_id: Annotated[str, Path(min_length=1, max_length=200)],
    body: QueueUpdateIn,
    principal: Annotated[Principal, Depends(require("agent"))],
) -> dict[str, bool]:
    """Complete (`status: completed`, `result`) or fail (`status: failed`, `error`) a claimed job."""
    return await update_job(hub_of(request), principal, job_id, body)


async def update_job(
    hub: Hub, principal: Principal, job_id: str, body: QueueUpdateIn
) -> dict[str, bool]:
    """`PUT /api/queue/{id}` once its input is validated (the route's and the hot lane's):
    the job is read, checked and its outcome recorded in one round of the hub's writer."""
    if body.status == "completed":  # the result's size, as `/result` and reports check it
        size = len(compact_json(body.result))
        limit = hub.queue.config.core.max_result_bytes
        if size > limit:
            raise ApiError(
                413, f"result is {size} bytes, over the {limit}-byte limit (max_result_bytes)"
            )

    def outcome_of(job: Job) -> Outcome:
        if job.status is not JobStatus.CLAIMED:
            raise ApiError(404, f"job {job_id} is not claimed (it is {job.status})")
        if principal.scope != "admin" and job.locked_by != agent_id_of(principal):
            raise ApiError(
                409, f"job {job_id} is claimed by {job.locked_by!r}, not {agent_id_of(principal)!r}"
            )
        lease = Lease.of(job)
        if body.status == "completed":
            return Completed(lease=lease, result=body.result)
        return Failed(lease, body.error or "failed")

    recorded = await settle(hub.engine.finish(job_id, outcome_of))
    if recorded.job is None:
        raise ApiError(404, f"job {job_id} is no longer claimed")
    return {"success": True}
