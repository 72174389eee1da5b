"""The dashboard served by `jobcore serve` at `/` (DESIGN §13).

The hub includes `router`; the dashboard reads `app.state.queue`,
`app.state.token_lookup`, `app.state.auth_disabled` and, when present,
`app.state.workers` (the agent registry).
"""

from __future__ import annotations

from fastapi import APIRouter

from jobcore_http.dashboard import actions, pages, pauses, static
from jobcore_http.dashboard.session import scope_from_cookie

router = APIRouter(include_in_schema=False)
router.include_router(static.router)
router.include_router(pages.router)
router.include_router(actions.router)
router.include_router(pauses.router)  # pause and resume (DESIGN §16)

__all__ = ["router", "scope_from_cookie"]
