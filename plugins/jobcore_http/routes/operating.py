"""Operating a queue (DESIGN §16): pause and resume queues and job types, list queues.

Pausing is a produce (or admin) action; a token limited to some queues or types
may pause only those (as a bulk filter naming them). The pause records the
token's name as who paused.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request

from jobcore import operating
from jobcore.errors import InvalidPayload
from jobcore_http.auth import hub_of, require
from jobcore_http.authorize import caller
from jobcore_http.errors import ApiError
from jobcore_http.models import ErrorOut, PausedOut, PauseIn, QueuesOut, ResumedOut
from jobcore_http.responses import JSONResponse

router = APIRouter(prefix="/api")

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut} for code in (400, 401, 403, 404, 422)
}
NameIn = Annotated[str, Path(min_length=1, max_length=200)]


def _may_pause(request: Request, kind: str, name: str) -> str:
    """403 unless the token's limits cover this queue or type; returns who is acting."""
    principal = caller(request)
    types, queues = ([name], []) if kind == "type" else ([], [name])
    refused = principal.limits.filter_refusal(principal.name, types, queues)
    if refused:
        raise ApiError(403, refused)
    return f"token {principal.name}"


@router.get(
    "/queues", response_model=QueuesOut, responses=ERRORS, dependencies=[Depends(require("read"))]
)
def queues(request: Request) -> JSONResponse:
    """Each queue with unfinished jobs or a pause: depth by status; whether paused, why,
    since, by whom; and the paused job types."""
    queue = hub_of(request).queue
    paused_types = [p.to_json() for p in queue.storage.pauses() if p.kind == "type"]
    return JSONResponse({"queues": operating.queue_rows(queue), "paused_types": paused_types})


@router.get("/schedules", responses=ERRORS, dependencies=[Depends(require("read"))])
def schedules(request: Request) -> JSONResponse:
    """Recurring jobs (plugin `cron`): each schedule with its next and last run; an empty
    list when the plugin is not loaded."""
    from jobcore_http.schedules import listing

    return JSONResponse({"schedules": listing(hub_of(request).queue)})


def _pause(request: Request, kind: str, name: str, body: PauseIn | None) -> JSONResponse:
    by = _may_pause(request, kind, name)
    reason = body.reason if body is not None else ""
    try:
        made, created = operating.pause(hub_of(request).queue, kind, name, reason=reason, by=by)
    except InvalidPayload as exc:
        raise ApiError(400, str(exc)) from None
    return JSONResponse({**made.to_json(), "created": created})


def _resume(request: Request, kind: str, name: str) -> JSONResponse:
    _may_pause(request, kind, name)
    try:
        lifted = operating.resume(hub_of(request).queue, kind, name)
    except InvalidPayload as exc:
        raise ApiError(400, str(exc)) from None
    return JSONResponse({"kind": kind, "name": name, "resumed": lifted is not None})


PRODUCE = [Depends(require("produce"))]


@router.post(
    "/queues/{name}/pause", response_model=PausedOut, responses=ERRORS, dependencies=PRODUCE
)
def pause_queue(request: Request, name: NameIn, body: PauseIn | None = None) -> JSONResponse:
    """Pause a queue: no worker or agent claims its jobs from then on; running jobs
    finish; enqueue still works. Pausing a paused queue answers `created: false`."""
    return _pause(request, "queue", name, body)


@router.post(
    "/queues/{name}/resume", response_model=ResumedOut, responses=ERRORS, dependencies=PRODUCE
)
def resume_queue(request: Request, name: NameIn) -> JSONResponse:
    """Lift a queue's pause; `resumed: false` when it was not paused."""
    return _resume(request, "queue", name)


@router.post(
    "/types/{name}/pause", response_model=PausedOut, responses=ERRORS, dependencies=PRODUCE
)
def pause_type(request: Request, name: NameIn, body: PauseIn | None = None) -> JSONResponse:
    """Pause a job type in every queue (as `pause_queue`)."""
    return _pause(request, "type", name, body)


@router.post(
    "/types/{name}/resume", response_model=ResumedOut, responses=ERRORS, dependencies=PRODUCE
)
def resume_type(request: Request, name: NameIn) -> JSONResponse:
    """Lift a job type's pause; `resumed: false` when it was not paused."""
    return _resume(request, "type", name)
