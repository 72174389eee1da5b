"""Pause and resume a queue or a job type from the dashboard (DESIGN §16), with confirmation.

`GET /ui/pause?action=pause|resume&kind=queue|type&name=…` shows what will happen
(pausing asks for a reason); its form POSTs to `/ui/pause` with the CSRF token.
Only produce and admin sessions act, within their token's queue and type limits.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from jobcore import operating
from jobcore.errors import JobcoreError
from jobcore_http.dashboard.access import Form, Viewer, refusal
from jobcore_http.dashboard.pages import error_page
from jobcore_http.dashboard.render import page
from jobcore_http.dashboard.session import Session
from jobcore_http.dashboard.state import dashboard

log = logging.getLogger("jobcore.http.dashboard")

router = APIRouter(include_in_schema=False)

ACTIONS = ("pause", "resume")
KINDS = ("queue", "type")


def paused_list(request: Request) -> list[dict[str, Any]]:
    """Every pause, as the overview shows them."""
    return [p.to_json() for p in dashboard(request).queue.storage.pauses()]


def _checked(request: Request, session: Session, values: Any) -> tuple[str, str, str] | Response:
    """(action, kind, name) from a query or a form, or the error page saying what is wrong."""
    action, kind, name = values.get("action", ""), values.get("kind", ""), values.get("name", "")
    if action not in ACTIONS or kind not in KINDS or not name:
        return error_page(
            request,
            session,
            400,
            "Unknown action",
            "Pause or resume a queue or a type: action=pause|resume, kind=queue|type, name=….",
        )
    if not session.can_act:
        return error_page(
            request, session, 403, "Not allowed", f"A {session.scope!r} token cannot {action}."
        )
    types, queues = ([name], []) if kind == "type" else ([], [name])
    beyond = session.limits.filter_refusal(session.name, types, queues)
    if beyond:
        return error_page(request, session, 403, "Not allowed", beyond)
    return action, kind, name


@router.get("/ui/pause", response_class=HTMLResponse)
def pause_confirm(request: Request, session: Viewer) -> Response:
    checked = _checked(request, session, request.query_params)
    if isinstance(checked, Response):
        return checked
    action, kind, name = checked
    return page(
        request,
        "confirm_pause.html",
        {"session": session, "active": "overview", "action": action, "kind": kind, "name": name},
    )


@router.post("/ui/pause")
def pause_or_resume(request: Request, data: Form, session: Viewer) -> Response:
    refused = refusal(request, session, data.get("csrf_token"))
    if refused:
        return error_page(request, session, 403, "Not allowed", refused)
    checked = _checked(request, session, data)
    if isinstance(checked, Response):
        return checked
    action, kind, name = checked
    queue = dashboard(request).queue
    try:
        if action == "pause":
            reason = data.get("reason", "")
            operating.pause(queue, kind, name, reason=reason, by=f"token {session.name}")
        else:
            operating.resume(queue, kind, name)
    except JobcoreError as exc:
        return error_page(request, session, 400, f"Cannot {action}", str(exc))
    log.info("dashboard: %s %s %s by token %s", action, kind, name, session.name)
    return RedirectResponse(f"/?done={action}d&n=1", status_code=303)
