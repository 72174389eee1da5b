"""Concurrency and rate limits (DESIGN §16): list them (read), set and clear them (admin),
and the concurrency and rate limits an agent's job types declare (agent, for the types it
registered).

A limit holds for every worker and agent on the store from the next claim on. A PUT
sets what its body gives (`concurrency`, `rate` with `period`), leaving the other as
it was; a DELETE clears both.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from fastapi.concurrency import run_in_threadpool

from jobcore import operating
from jobcore.concurrency import Limit, checked_limit
from jobcore.errors import InvalidPayload
from jobcore.rates import Rate, checked_rate_limit
from jobcore_http.auth import acting_as, hub_of, require
from jobcore_http.errors import ApiError
from jobcore_http.hub import Hub
from jobcore_http.models import (
    DeclaredLimitsIn,
    DeclaredLimitsOut,
    ErrorOut,
    LimitClearedOut,
    LimitIn,
    LimitSetOut,
    LimitsOut,
)
from jobcore_http.responses import JSONResponse
from jobcore_http.tokens import Principal

router = APIRouter(prefix="/api")

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut} for code in (400, 401, 403, 404, 409, 422)
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


@router.post("/workers/limits", response_model=DeclaredLimitsOut, responses=ERRORS)
async def declare_limits(
    request: Request,
    body: DeclaredLimitsIn,
    principal: Annotated[Principal, Depends(require("agent"))],
) -> dict[str, Any]:
    """The concurrency and rate limits the job types of this agent declare, as a worker
    writes its own at start: only of types the agent registered (and its token may use),
    source `declared`, and a limit or rate set at run time stays until cleared.
    `unlimited` / `unrated`: registered types that declare no concurrency limit / no rate
    (their declared one goes). Without `rates` and `unrated` (an older agent) the declared
    rates stay as they are. Types its token may not use are left as they are (`ignored`)."""
    worker_id = body.worker_id
    acting_as(principal, worker_id)
    hub = hub_of(request)
    named = [limit.name for limit in body.limits] + list(body.unlimited)
    rated = [rate.name for rate in body.rates or ()] + list(body.unrated or ())
    for names in (named, rated):
        twice = named_twice(names)
        if twice is not None:
            raise ApiError(422, f"type {twice!r} is named twice; give each type once")
    registered = await run_in_threadpool(_registered_types, hub, worker_id)
    if registered is None:
        raise ApiError(
            409, f"agent {worker_id!r} is not registered: POST /api/workers/register first"
        )
    for name in named + rated:
        if name not in registered:
            raise ApiError(
                403,
                f"agent {worker_id!r} did not register type {name!r}; it may declare limits "
                f"only of its registered types ({', '.join(sorted(registered)) or 'none'})",
            )
    allowed = principal.limits.types  # a token limited to some types declares only theirs
    ignored = {name for name in named + rated if allowed is not None and name not in allowed}
    try:  # all checked before any is written: a bad body changes nothing
        declared: list[Limit] = [
            checked_limit(limit.scope, limit.name, limit.concurrency, "declared")
            for limit in body.limits
            if limit.name not in ignored
        ]
        declared_rates: list[Rate] = [
            checked_rate_limit(rate.scope, rate.name, rate.rate, rate.period, "declared")
            for rate in body.rates or ()
            if rate.name not in ignored
        ]
    except InvalidPayload as exc:
        raise ApiError(422, str(exc)) from None
    unlimited = [name for name in body.unlimited if name not in ignored]
    unrated = [name for name in body.unrated or () if name not in ignored]
    changed = await run_in_threadpool(operating.declare_limits, hub.queue, declared, unlimited)
    if body.rates is not None or body.unrated is not None:
        changed_rates = await run_in_threadpool(
            operating.declare_rates, hub.queue, declared_rates, unrated
        )
        changed = changed or changed_rates
    return {"changed": changed, "ignored": sorted(ignored)}


def named_twice(names: Sequence[str]) -> str | None:
    """The first name in sorted order that `names` holds more than once, if any (one pass)."""
    counts = Counter(names)
    return min((name for name, count in counts.items() if count > 1), default=None)


def _registered_types(hub: Hub, worker_id: str) -> set[str] | None:
    """The job types `worker_id` registered with (None: it is not registered)."""
    for record in hub.store.list_workers():
        if record.worker_id == worker_id:
            return set(record.types)
    return None
