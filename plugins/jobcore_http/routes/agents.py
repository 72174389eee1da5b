"""Remote agents: register, claim (long-poll), heartbeat, result, fail; the workers registry."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Path, Request, Response
from fastapi.concurrency import run_in_threadpool

from jobcore.errors import JobcoreError, JobNotFound
from jobcore.models import (
    Completed,
    Job,
    JobStatus,
    Lease,
    Released,
    compact_json,
)
from jobcore.timeutil import iso
from jobcore_http.auth import acting_as, hub_of, principal_of, require
from jobcore_http.authorize import claimable, may_enqueue
from jobcore_http.engine import settle
from jobcore_http.enqueue import build_job
from jobcore_http.errors import ApiError, status_of
from jobcore_http.hub import MAX_RUNTIME_EXCEEDED, Hub
from jobcore_http.models import (
    ClaimIn,
    ErrorOut,
    FailIn,
    HeartbeatIn,
    HeartbeatOut,
    JobOut,
    RegisterIn,
    RegisterOut,
    ReleaseIn,
    ResultIn,
    WorkersOut,
)
from jobcore_http.responses import JSONResponse
from jobcore_http.retries import failure_outcome, hold_limit
from jobcore_http.store import WorkerRecord
from jobcore_http.tokens import Principal
from jobcore_http.views import job_json, last_attempt

router = APIRouter(prefix="/api")

JobId = Annotated[str, Path(min_length=1, max_length=200)]
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut} for code in (400, 401, 403, 404, 409, 413, 422, 429)
}
Agent = Annotated[Principal, Depends(require("agent"))]


@router.post("/workers/register", response_model=RegisterOut, responses=ERRORS)
async def register(request: Request, body: RegisterIn, principal: Agent) -> dict[str, float]:
    """Register or update an agent's capabilities; answers the intervals to use."""
    acting_as(principal, body.worker_id)
    hub = hub_of(request)
    now = hub.now()
    record = WorkerRecord(
        worker_id=body.worker_id,
        name=body.name,
        cores=body.cores,
        ram_gb=body.ram_gb,
        tags=list(body.tags),
        types=list(body.types),
        registered_at=now,
        last_seen=now,
    )
    await run_in_threadpool(hub.registry.register, record)
    lease = hub.lease_ms / 1000
    return {"heartbeat_interval": lease / 4, "lease": lease, "poll_wait": hub.settings.poll_wait}


@router.get(
    "/workers", response_model=WorkersOut, responses=ERRORS, dependencies=[Depends(require("read"))]
)
def workers(request: Request) -> dict[str, Any]:
    """Every agent: capabilities, last seen, `active|idle|lost`, the jobs it holds."""
    return {"workers": hub_of(request).workers()}


@router.post(
    "/jobs/claim",
    response_model=JobOut | list[JobOut],
    responses={204: {"description": "nothing claimable within `wait`"}, **ERRORS},
)
async def claim(request: Request, body: ClaimIn, principal: Agent) -> Response:
    """Claim up to `max_jobs` jobs, waiting up to `wait` seconds for one to be claimable.

    The first `start` of them (all when omitted) are marked started by the claim itself;
    the others are read-ahead (`started_at` null) and start with a `start` report."""
    acting_as(principal, body.worker_id)
    types, queues = claimable(principal, body.types, body.queues)
    hub = hub_of(request)
    key = request.headers.get("X-Idempotency-Key")
    key = key if key is not None and hub.claim_replays.usable(key) else None
    if key is not None and (leases := hub.claim_replays.get(body.worker_id, key)) is not None:
        held = await run_in_threadpool(_still_held, hub, body.worker_id, leases)
        if not held:
            return Response(status_code=204)
        if body.max_jobs is None:
            return JSONResponse(job_json(held[0]))
        return JSONResponse([job_json(job) for job in held])
    if body.worker_id in hub.registry.draining:
        hub.registry.seen(body.worker_id, hub.now())
        return Response(status_code=204, headers={"X-Jobcore-Drain": "1"})
    wait = min(body.wait, hub.settings.max_wait)
    limit = min(body.max_jobs or 1, hub.settings.max_jobs_per_claim)
    waiting = hub.longpolls.get(body.worker_id, 0)
    if wait > 0 and waiting >= hub.settings.max_claims_per_agent:
        raise ApiError(
            429,
            f"agent {body.worker_id!r} already has {waiting} claims waiting "
            f"(max_claims_per_agent={hub.settings.max_claims_per_agent})",
        )
    hub.registry.seen(body.worker_id, hub.now())
    hub.longpolls[body.worker_id] = waiting + 1
    try:
        jobs = await _claim(
            request, hub, body.worker_id, limit, list(queues), list(types), wait, body.start
        )
    finally:
        left = hub.longpolls.get(body.worker_id, 1) - 1
        if left > 0:
            hub.longpolls[body.worker_id] = left
        else:
            hub.longpolls.pop(body.worker_id, None)
    if not jobs:
        return Response(status_code=204)
    if wait > 0:
        await _still_authorized(request, hub, body.worker_id, jobs)
    if body.worker_id in hub.registry.draining:  # told to drain while it waited: none for it
        await _give_back(hub, jobs)
        return Response(status_code=204, headers={"X-Jobcore-Drain": "1"})
    if key is not None:
        hub.claim_replays.remember(body.worker_id, key, [(job.id, job.lease_id) for job in jobs])
    if body.max_jobs is None:
        return ClaimAnswer(job_json(jobs[0]), hub, jobs)
    return ClaimAnswer([job_json(job) for job in jobs], hub, jobs)


class ClaimAnswer(JSONResponse):
    """Claimed jobs, given back instead of sent when the client left first (a stopping agent
    half-closes its long-poll): no job stays claimed for an answer that is never sent."""

    def __init__(self, content: Any, hub: Hub, jobs: list[Job]) -> None:
        super().__init__(content)
        self.hub = hub
        self.jobs = jobs

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await asyncio.sleep(0)  # a disconnect seen in this loop turn is recorded first
        if await Request(scope, receive).is_disconnected():
            await _give_back(self.hub, self.jobs)
            return
        await super().__call__(scope, receive, send)


async def _give_back(hub: Hub, jobs: list[Job]) -> None:
    for job in jobs:
        await settle(hub.engine.record(Released(Lease.of(job))))


async def _claim(
    request: Request,
    hub: Hub,
    worker: str,
    limit: int,
    queues: list[str],
    types: list[str],
    wait: float,
    start: int | None,
) -> list[Job]:
    """Hand the claim to the engine; if the client leaves first, give back what it got."""
    pending = hub.engine.claim(worker, limit, queues, types, wait, start)
    answer: asyncio.Future[list[Job]] = asyncio.wrap_future(pending.future)
    if wait <= 0:
        return await answer
    gone: asyncio.Future[None] = asyncio.ensure_future(_disconnected(request))
    try:
        waiting: list[asyncio.Future[Any]] = [answer, gone]
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if answer.done():
        return answer.result()
    hub.engine.withdraw(pending)
    return []


async def _still_authorized(request: Request, hub: Hub, worker: str, jobs: list[Job]) -> None:
    """A long-poll outlives its auth check: a token revoked meanwhile gets no jobs (they go
    back at once, instead of sitting claimed by a revoked agent until the lease expires)."""
    try:
        principal = await run_in_threadpool(principal_of, request)
        if principal is None or not principal.allows("agent"):
            raise ApiError(401, "unknown or revoked token", {"WWW-Authenticate": "Bearer"})
        acting_as(principal, worker)
    except ApiError:
        await _give_back(hub, jobs)
        raise


async def _disconnected(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def _job(hub: Hub, job_id: str) -> Job:
    return await run_in_threadpool(hub.queue.get, job_id)


def _still_held(hub: Hub, worker: str, leases: list[tuple[str, str | None]]) -> list[Job]:
    """The jobs of an earlier answer that `worker` still holds under the same leases."""
    held = []
    for job_id, lease_id in leases:
        try:
            job = hub.queue.get(job_id)
        except JobNotFound:  # deleted since
            continue
        if lease_id is not None and _live(job, worker, lease_id):
            held.append(job)
    return held


def _live(job: Job, worker: str, lease_id: str | None) -> bool:
    return (
        job.status is JobStatus.CLAIMED
        and job.locked_by == worker
        and (lease_id is None or lease_id == job.lease_id)
    )


def _not_yours(job: Job, worker: str) -> ApiError:
    holder = f", claimed by {job.locked_by!r}" if job.status is JobStatus.CLAIMED else ""
    return ApiError(
        409, f"job {job.id} is not a live claim of {worker!r} (it is {job.status}{holder})"
    )


@router.post("/jobs/{job_id}/heartbeat", response_model=HeartbeatOut, responses=ERRORS)
async def heartbeat(
    request: Request, job_id: JobId, body: HeartbeatIn, principal: Agent
) -> dict[str, Any]:
    """Extend the lease; `cancel_requested: true` tells the agent to stop the job."""
    acting_as(principal, body.worker_id)
    hub = hub_of(request)
    drain = body.worker_id in hub.registry.draining
    now = hub.now()
    hub.registry.seen(body.worker_id, now)
    if body.lease_id is not None:  # fenced by the token: no read first (timeouts: maintenance)
        lease = Lease(job_id, body.lease_id, body.worker_id)
        cancel = await settle(hub.engine.extend(lease))
        if cancel is not None:
            _progress(hub, job_id, body.progress)
            return {
                "lease_expires_at": iso(now + hub.lease_ms),
                "cancel_requested": cancel,
                "drain": drain,
            }
    job = await _job(hub, job_id)
    if body.lease_id is None and _live(job, body.worker_id, None):
        started = job.started_at or job.claimed_at
        if job.timeout_ms is not None and started is not None and now - started > job.timeout_ms:
            await settle(hub.engine.record(hub.timeout_outcome(job, now)))
            return {"lease_expires_at": None, "cancel_requested": True, "drain": drain}
        cancel = await settle(hub.engine.extend(Lease.of(job)))
        if cancel is not None:
            _progress(hub, job_id, body.progress)
            return {
                "lease_expires_at": iso(now + hub.lease_ms),
                "cancel_requested": cancel,
                "drain": drain,
            }
        job = await _job(hub, job_id)
    attempt = last_attempt(job, body.worker_id, body.lease_id)
    if attempt is not None and (
        str(attempt.get("error")).startswith(MAX_RUNTIME_EXCEEDED)
        or attempt.get("outcome") == "cancelled"
    ):
        return {"lease_expires_at": None, "cancel_requested": True, "drain": drain}
    raise _not_yours(job, body.worker_id)


def _progress(hub: Hub, job_id: str, progress: Any) -> None:
    if progress is not None:
        hub.registry.progress[job_id] = progress


@router.post("/jobs/{job_id}/result", response_model=JobOut, responses=ERRORS)
async def result(
    request: Request,
    job_id: JobId,
    body: ResultIn,
    principal: Agent,
    x_idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> JSONResponse:
    """Record the job's result; a repeated report answers 200 with the job as recorded."""
    acting_as(principal, body.worker_id)
    hub = hub_of(request)
    hub.registry.seen(body.worker_id, hub.now())
    size = len(compact_json(body.result))
    limit = hub.queue.config.core.max_result_bytes
    if size > limit:
        raise ApiError(
            413, f"result is {size} bytes, over the {limit}-byte limit (max_result_bytes)"
        )
    children = []
    for index, child in enumerate(body.children or ()):
        try:
            children.append(build_job(hub.queue, child, parent_id=job_id))
        except (ApiError, JobcoreError) as exc:
            status = exc.status if isinstance(exc, ApiError) else status_of(exc)
            raise ApiError(status, f"children.{index}: {exc}") from None
    may_enqueue(principal, children, "children.")
    if body.lease_id is not None:  # fenced by the token: record first, read only if refused
        lease = Lease(job_id, body.lease_id, body.worker_id)
        recorded = await settle(hub.engine.record(Completed(lease, body.result, tuple(children))))
        if recorded.job is not None:
            return JSONResponse(job_json(recorded.job))
    job = await _job(hub, job_id)
    if body.lease_id is None and _live(job, body.worker_id, None):
        outcome = Completed(Lease.of(job), body.result, tuple(children))
        recorded = await settle(hub.engine.record(outcome))
        if recorded.job is not None:
            return JSONResponse(job_json(recorded.job))
        job = await _job(hub, job_id)
    attempt = last_attempt(job, body.worker_id, body.lease_id)
    if (
        job.status is JobStatus.COMPLETED
        and attempt is not None
        and attempt.get("outcome") == "completed"
    ):
        return JSONResponse(job_json(job))  # a repeat: already recorded
    raise _not_yours(job, body.worker_id)


@router.post("/jobs/{job_id}/fail", response_model=JobOut, responses=ERRORS)
async def fail(request: Request, job_id: JobId, body: FailIn, principal: Agent) -> JSONResponse:
    """Report a failed attempt; the retry policy decides: `scheduled` with backoff, or `failed`."""
    acting_as(principal, body.worker_id)
    hub = hub_of(request)
    now = hub.now()
    hub.registry.seen(body.worker_id, now)
    job = await _job(hub, job_id)
    if _live(job, body.worker_id, body.lease_id):
        outcome = failure_outcome(
            hub.queue, job, body.reason, retryable=body.retryable, retry_in=body.retry_in
        )
        if body.hold_limit is not None and body.retryable:
            await run_in_threadpool(hold_limit, hub.queue, job.id, body.hold_limit)
        recorded = await settle(hub.engine.record(outcome))
        if recorded.job is not None:
            return JSONResponse(job_json(recorded.job))
        job = await _job(hub, job_id)
    attempt = last_attempt(job, body.worker_id, body.lease_id)
    if (
        attempt is not None
        and attempt.get("outcome") in ("failed", "retrying", "cancelled")
        and attempt.get("error") == body.reason
    ):
        return JSONResponse(job_json(job))  # a repeat: already recorded
    raise _not_yours(job, body.worker_id)


@router.post("/jobs/{job_id}/release", response_model=JobOut, responses=ERRORS)
async def release(
    request: Request, job_id: JobId, body: ReleaseIn, principal: Agent
) -> JSONResponse:
    """Give a claimed job back unfinished (the attempt is not counted), e.g. at shutdown."""
    acting_as(principal, body.worker_id)
    hub = hub_of(request)
    hub.registry.seen(body.worker_id, hub.now())
    job = await _job(hub, job_id)
    if _live(job, body.worker_id, body.lease_id):
        recorded = await settle(hub.engine.record(Released(Lease.of(job))))
        if recorded.job is not None:
            return JSONResponse(job_json(recorded.job))
        job = await _job(hub, job_id)
    attempt = last_attempt(job, body.worker_id, body.lease_id)
    if attempt is not None and attempt.get("outcome") in ("released", "cancelled"):
        return JSONResponse(job_json(job))  # a repeat: already recorded
    raise _not_yours(job, body.worker_id)


@router.post(
    "/workers/{worker_id}/drain",
    status_code=204,
    responses=ERRORS,
    dependencies=[Depends(require("admin"))],
)
def drain(
    request: Request, worker_id: Annotated[str, Path(min_length=1, max_length=200)]
) -> Response:
    """Ask an agent to stop claiming, finish its running jobs and exit (register clears it)."""
    if not hub_of(request).registry.drain(worker_id):
        raise ApiError(404, f"no registered worker {worker_id!r}")
    return Response(status_code=204)
