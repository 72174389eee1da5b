"""Concurrency and rate limits (DESIGN §16): list them (read), set and clear them (admin).

A limit holds for every worker and agent on the store from the next claim on. A PUT
sets what its body gives (`concurrency`, `rate` with `period`), leaving the other as
it was; a DELETE clears both.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request

from jobcore import operating
from jobcore.concurrency import checked_limit
from jobcore.errors import InvalidPayload
from jobcore.rates import checked_rate_limit
from jobcore_http.auth import hub_of, require
from jobcore_http.errors import ApiError
from jobcore_http.models import ErrorOut, LimitClearedOut, LimitIn, LimitSetOut, LimitsOut
from jobcore_http.responses import JSONResponse

router = APIRouter(prefix="/api")

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut} for code in (400, 401, 403, 404, 422)
}
NameIn = Annotated[str, Path(min_length=1, max_length=200)]
ADMIN = [Depends(require("admin"))]


@router.get(
    "/limits", response_model=LimitsOut, responses=ERRORS, dependencies=[Depends(require("read"))]
)
def limits(request: Request) -> JSONResponse:
    """Every concurrency limit (scope, name, concurrency, where it comes from, what it holds
    claimed now), then every rate limit (rate, period, starts in its current window)."""
    return JSONResponse({"limits": operating.limit_rows(hub_of(request).queue)})


def _set(request: Request, scope: str, name: str, body: LimitIn) -> JSONResponse:
    queue = hub_of(request).queue
    made: dict[str, Any] = {"scope": scope, "name": name}
    try:  # both checked before either is written: a bad body changes nothing
        if body.concurrency is not None:
            checked_limit(scope, name, body.concurrency)
        if body.rate is not None:
            checked_rate_limit(scope, name, body.rate, body.period)
        if body.concurrency is not None:
            made |= operating.set_limit(queue, scope, name, body.concurrency).to_json()
        if body.rate is not None:
            rate = operating.set_rate(queue, scope, name, body.rate, body.period)
            made |= rate.to_json()
    except InvalidPayload as exc:
        raise ApiError(400, str(exc)) from None
    return JSONResponse(made)


def _clear(request: Request, scope: str, name: str) -> JSONResponse:
    queue = hub_of(request).queue
    try:
        cleared = operating.clear_limit(queue, scope, name)
        cleared_rate = operating.clear_rate(queue, scope, name)
    except InvalidPayload as exc:
        raise ApiError(400, str(exc)) from None
    gone = cleared is not None or cleared_rate is not None
    return JSONResponse({"scope": scope, "name": name, "cleared": gone})


@router.put(
    "/queues/{name}/limit", response_model=LimitSetOut, responses=ERRORS, dependencies=ADMIN
)
def set_queue_limit(request: Request, name: NameIn, body: LimitIn) -> JSONResponse:
    """At most `concurrency` of this queue's jobs claimed at once, across the store."""
    return _set(request, "queue", name, body)


@router.delete(
    "/queues/{name}/limit", response_model=LimitClearedOut, responses=ERRORS, dependencies=ADMIN
)
def clear_queue_limit(request: Request, name: NameIn) -> JSONResponse:
    """Remove this queue's limit; `cleared: false` when it had none."""
    return _clear(request, "queue", name)


@router.put("/types/{name}/limit", response_model=LimitSetOut, responses=ERRORS, dependencies=ADMIN)
def set_type_limit(request: Request, name: NameIn, body: LimitIn) -> JSONResponse:
    """At most `concurrency` of this type's jobs claimed at once (wins over its declared one)."""
    return _set(request, "type", name, body)


@router.delete(
    "/types/{name}/limit", response_model=LimitClearedOut, responses=ERRORS, dependencies=ADMIN
)
def clear_type_limit(request: Request, name: NameIn) -> JSONResponse:
    """Remove this type's limit (a declared one returns when a worker of the type starts)."""
    return _clear(request, "type", name)


@router.put(
    "/types/{name}/key-limit", response_model=LimitSetOut, responses=ERRORS, dependencies=ADMIN
)
def set_key_limit(request: Request, name: NameIn, body: LimitIn) -> JSONResponse:
    """At most `concurrency` of this type's jobs claimed at once per concurrency key."""
    return _set(request, "key", name, body)


@router.delete(
    "/types/{name}/key-limit",
    response_model=LimitClearedOut,
    responses=ERRORS,
    dependencies=ADMIN,
)
def clear_key_limit(request: Request, name: NameIn) -> JSONResponse:
    """Remove this type's per-key limit."""
    return _clear(request, "key", name)
