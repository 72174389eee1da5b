"""The hot lane: the routes producers and JSON-queue workers call per job, without the
framework's per-request machinery.

`POST /api/jobs`, `POST /api/jobs/batch`, `GET /api/queue` and `PUT /api/queue/{id}`
are what a producer or a JSON-queue worker calls once per job; `POST /api/jobs/reports`
is what an agent calls once per few jobs (its read-ahead starts wait for the answer),
and `POST /api/jobs/claim` once per batch of jobs. Through FastAPI each
paid for its exception middleware, routing, dependency solving and a second parse of
the body (about 40% of the hub's CPU per request, measured with py-spy: see
benchmarks/results/hub.md). This middleware sits inside `BodyLimit` (so size, time
and JSON checks still run first), takes a request only when its input is plainly good
(a JSON content type, a body that validates against the route's own model, a path
parameter within bounds), then runs the route's own function (`enqueue_one`,
`enqueue_batch_of`, `next_job_for`, `update_job`, `record_reports`, and the claim route
itself) after the route's own auth check.
Errors those raise are answered by `errors.answer_for`, the app's own handlers.

Every other request, and every request whose input is not plainly good, goes to the
app unchanged (its body replayed), so each error answer comes from the one place that
always made it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from jobcore_http.auth import require
from jobcore_http.errors import answer_for
from jobcore_http.hub import Hub
from jobcore_http.limits import PARSED_BODY
from jobcore_http.models import BatchIn, ClaimIn, EnqueueIn, QueueUpdateIn, ReportsIn
from jobcore_http.responses import JSONResponse
from jobcore_http.tokens import Principal

QUEUE_PREFIX = "/api/queue/"
MAX_JOB_ID = 200  # as the route's path parameter

_produce = require("produce")
_agent = require("agent")


class HotLane:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            taken = _route(scope)
            if taken is not None:
                await taken(scope, receive, send, self.app)
                return
        await self.app(scope, receive, send)


Lane = Callable[[Scope, Receive, Send, ASGIApp], Awaitable[None]]


def _route(scope: Scope) -> Lane | None:
    method, path = scope["method"], scope["path"]
    if scope.get("root_path"):
        return None
    if method == "POST":
        if path == "/api/jobs":
            return _enqueue
        if path == "/api/jobs/batch":
            return _batch
        if path == "/api/jobs/reports":
            return _reports
        if path == "/api/jobs/claim":
            return _claim
    elif method == "GET" and path == "/api/queue":
        return _next
    elif method == "PUT" and path.startswith(QUEUE_PREFIX):
        job_id = path[len(QUEUE_PREFIX) :]
        if job_id and "/" not in job_id and len(job_id) <= MAX_JOB_ID:
            return _update
    return None


def _headers(scope: Scope) -> dict[bytes, list[bytes]]:
    found: dict[bytes, list[bytes]] = {}
    for name, value in scope["headers"]:
        found.setdefault(name, []).append(value)
    return found


def _json_body(scope: Scope, model: type[BaseModel]) -> Any:
    """The body validated by `model`, or None when it is not plainly good (no JSON content
    type, not parsed by `BodyLimit`, or invalid: the app then answers as it always did)."""
    content_type = _headers(scope).get(b"content-type", [])
    if len(content_type) != 1:
        return None
    if content_type[0].split(b";", 1)[0].strip().lower() != b"application/json":
        return None
    if PARSED_BODY not in scope:
        return None
    try:
        return model.model_validate(scope[PARSED_BODY])
    except ValidationError:
        return None


async def _answer(
    scope: Scope,
    receive: Receive,
    send: Send,
    needs: Callable[[Request], Awaitable[Principal]],
    run: Callable[[Hub, Principal], Awaitable[Any]],
) -> None:
    """Authenticate as the route does, run it, answer as the app would."""
    request = Request(scope)
    response: Response
    try:
        principal = await needs(request)
        result = await run(request.app.state.hub, principal)
        response = result if isinstance(result, Response) else JSONResponse(result)
    except Exception as exc:
        response = answer_for(scope["method"], scope["path"], exc)
    await response(scope, receive, send)


async def _to_app(scope: Scope, receive: Receive, send: Send, app: ASGIApp) -> None:
    await app(scope, receive, send)


async def _enqueue(scope: Scope, receive: Receive, send: Send, app: ASGIApp) -> None:
    from jobcore_http.routes.producers import enqueue_one

    body = _json_body(scope, EnqueueIn)
    keys = _headers(scope).get(b"idempotency-key", [])
    if body is None or len(keys) > 1:
        return await _to_app(scope, receive, send, app)
    key: str | None = None
    if keys:
        key = keys[0].decode("latin-1")
        if len(key) > 1000:  # as the route's Header(max_length=1000)
            return await _to_app(scope, receive, send, app)
    await _answer(scope, receive, send, _produce, lambda hub, who: enqueue_one(hub, who, body, key))


async def _batch(scope: Scope, receive: Receive, send: Send, app: ASGIApp) -> None:
    from jobcore_http.routes.producers import enqueue_batch_of

    body = _json_body(scope, BatchIn)
    if body is None:
        return await _to_app(scope, receive, send, app)
    await _answer(scope, receive, send, _produce, lambda hub, who: enqueue_batch_of(hub, who, body))


async def _next(scope: Scope, receive: Receive, send: Send, app: ASGIApp) -> None:
    from jobcore_http.routes.simple_queue import next_job_for

    await _answer(scope, receive, send, _agent, next_job_for)


async def _update(scope: Scope, receive: Receive, send: Send, app: ASGIApp) -> None:
    from jobcore_http.routes.simple_queue import update_job

    body = _json_body(scope, QueueUpdateIn)
    if body is None:
        return await _to_app(scope, receive, send, app)
    job_id = scope["path"][len(QUEUE_PREFIX) :]
    await _answer(scope, receive, send, _agent, lambda hub, who: update_job(hub, who, job_id, body))


async def _reports(scope: Scope, receive: Receive, send: Send, app: ASGIApp) -> None:
    from jobcore_http.routes.reports import record_reports

    body = _json_body(scope, ReportsIn)
    if body is None:
        return await _to_app(scope, receive, send, app)
    await _answer(scope, receive, send, _agent, lambda hub, who: record_reports(hub, who, body))


async def _claim(scope: Scope, receive: Receive, send: Send, app: ASGIApp) -> None:
    """The claim route's own function, called with a request that reads the client's end
    (a long-poll watches for it, and a claim answer is given back if the client left)."""
    from jobcore_http.routes.agents import claim

    body = _json_body(scope, ClaimIn)
    if body is None:
        return await _to_app(scope, receive, send, app)
    await receive()  # the body `BodyLimit` replays: read, as the framework would have
    request = Request(scope, receive)
    response: Response
    try:
        principal = await _agent(request)
        response = await claim(request, body, principal)
    except Exception as exc:
        response = answer_for(scope["method"], scope["path"], exc)
    await response(scope, receive, send)
