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

from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool

from jobcore_http import errors
from jobcore_http.hub import Hub
from jobcore_http.limits import BodyLimit
from jobcore_http.routes import agents, events, producers, simple_queue, tokens

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
        title="jobcore hub", version=__version__, description=DESCRIPTION, lifespan=lifespan
    )
    app.state.hub = hub
    errors.install(app)
    app.include_router(events.router)  # before /api/jobs/{id}: /api/jobs/events is an alias
    app.include_router(producers.router)
    app.include_router(agents.router)
    app.include_router(simple_queue.router)
    app.include_router(tokens.router)
    _mount_dashboard(app, hub)
    app.add_middleware(BodyLimit, max_body=hub.settings.max_body)
    return app


def _mount_dashboard(app: FastAPI, hub: Hub) -> None:
    try:
        dashboard: Any = importlib.import_module("jobcore_http.dashboard")
    except ModuleNotFoundError as exc:
        if exc.name != "jobcore_http.dashboard":
            raise
        return
    if callable(getattr(dashboard, "setup", None)):
        dashboard.setup(app, hub)
    elif getattr(dashboard, "router", None) is not None:
        app.include_router(dashboard.router)
