"""`create_app(hub)`: the FastAPI application of `jobcore serve`.

Extension point for the dashboard (DESIGN §13): if the package
`jobcore_http.dashboard` exists, its `setup(app, hub)` is called (or, failing
that, its `router` is included). It authenticates with the same helpers as
every route (`jobcore_http.auth.require`, `hub.authenticate`,
`hub.principal_resolvers`).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool

from jobcore_http import errors
from jobcore_http.auth import bearer_token, principal_of, require, require_any
from jobcore_http.hotlane import HotLane
from jobcore_http.hub import Hub
from jobcore_http.limits import BodyLimit
from jobcore_http.responses import JSONResponse
from jobcore_http.routes import agents, events, producers, reports, simple_queue, tokens
from jobcore_http.routes import limits as limit_routes  # DESIGN §16
from jobcore_http.routes import operating as operating_routes  # DESIGN §16
from jobcore_http.tokens import SCOPES, Principal

log = logging.getLogger("jobcore.http")

DESCRIPTION = """The jobcore hub: enqueue and inspect jobs, remote agents, live events.

Authenticate with `Authorization: Bearer TOKEN` (`jobcore tokens create`).
Scopes: `read` (GET routes, events), `produce` (read + enqueue, cancel,
retry), `agent` (agent routes, for the token's own agent id), `admin`
(everything). Errors are `{"error": "..."}`."""


def create_app(hub: Hub) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        hub.start(asyncio.get_running_loop())
        try:
            yield
        finally:
            await run_in_threadpool(hub.close)

    from jobcore import __version__

    app = FastAPI(
        title="jobcore hub",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        default_response_class=JSONResponse,  # renders any stored value (lone surrogates too)
    )
    app.state.hub = hub
    errors.install(app)
    app.include_router(events.router)  # before /api/jobs/{id}: /api/jobs/events is an alias
    app.include_router(reports.router)  # before /api/jobs/{id} routes
    app.include_router(producers.router)
    app.include_router(agents.router)
    app.include_router(simple_queue.router)
    app.include_router(tokens.router)
    app.include_router(operating_routes.router)  # pause, resume, queues (DESIGN §16)
    app.include_router(limit_routes.router)  # concurrency limits (DESIGN §16)
    _mount_artifacts(app, hub)
    _mount_dashboard(app, hub)
    app.add_middleware(HotLane)  # inside BodyLimit: bodies are checked before it reads them
    app.add_middleware(
        BodyLimit,
        max_body=hub.settings.max_body,
        body_timeout=hub.settings.body_timeout,
        may_send=_known_caller,
    )
    return app


def _known_caller(scope: Any) -> bool:
    """Whether the request carries a valid bearer token (or the hub runs without auth)."""
    request = Request(scope)
    if request.app.state.hub.settings.insecure_no_auth:
        return True
    try:
        return bearer_token(request) is not None and principal_of(request) is not None
    except errors.ApiError:
        return False


def _optional(module: str) -> Any:
    """Import a part of the hub that may be absent (another helper's), or None."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        return None


def _mount_artifacts(app: FastAPI, hub: Hub) -> None:
    artifacts = _optional("jobcore_http.artifacts")
    if artifacts is None:
        return
    directory = hub.settings.artifacts_dir or artifacts.default_artifacts_dir(hub.queue.url)
    app.include_router(
        artifacts.artifacts_router(
            directory, admin=require("admin"), read=require_any("read", "agent")
        )
    )


def _mount_dashboard(app: FastAPI, hub: Hub) -> None:
    """State the dashboard reads, its cookie sessions for GET/HEAD, then its routes."""
    app.state.queue = hub.queue
    app.state.auth_disabled = hub.settings.insecure_no_auth
    app.state.token_lookup = hub.token_lookup
    app.state.workers = hub.workers
    dashboard = _optional("jobcore_http.dashboard")
    if dashboard is None:
        return
    session = _optional("jobcore_http.dashboard.session")
    from_cookie = getattr(session, "scope_from_cookie", None)
    if callable(from_cookie):

        def cookie_principal(request: Request) -> Principal | None:
            if request.method not in ("GET", "HEAD"):
                return None
            scope = from_cookie(request)
            if scope not in SCOPES:
                return None
            return Principal(name="(dashboard session)", scope=scope)

        hub.principal_resolvers.append(cookie_principal)
    if callable(getattr(dashboard, "setup", None)):
        dashboard.setup(app, hub)
    elif getattr(dashboard, "router", None) is not None:
        app.include_router(dashboard.router)
