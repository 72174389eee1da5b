"""Sign-in, sign-out and the actions: retry, cancel, and bulk retry/cancel by filter."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from jobcore_dlq.signature import signature as error_signature
from starlette.responses import HTMLResponse, RedirectResponse, Response

from jobcore.errors import IllegalTransition, JobcoreError, JobNotFound
from jobcore.models import Job
from jobcore_http.auth import hub_of
from jobcore_http.bulk import bulk_change
from jobcore_http.dashboard.access import Form, Viewer, refusal, safe_next
from jobcore_http.dashboard.filters import CANCELLABLE, RETRYABLE, BadFilter, JobFilter
from jobcore_http.dashboard.pages import error_page
from jobcore_http.dashboard.render import page
from jobcore_http.dashboard.session import (
    COOKIE,
    MAX_AGE_S,
    VIEW_SCOPES,
    Session,
    app_key,
    auth_disabled,
    csrf_ok,
    lookup,
    make_cookie,
    read_session,
    sign_out,
    token_hash,
)
from jobcore_http.dashboard.state import dashboard

log = logging.getLogger("jobcore.http.dashboard")

router = APIRouter(include_in_schema=False)

VERBS = {"retry": "Retry", "cancel": "Cancel"}


def _signed_in(request: Request, hashed: str, target: str) -> Response:
    response = RedirectResponse(safe_next(target), status_code=303)
    response.set_cookie(
        COOKIE,
        make_cookie(app_key(request), hashed),
        max_age=MAX_AGE_S,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return response


@router.get("/ui/login", response_class=HTMLResponse)
def login_form(request: Request, next: str = "/") -> Response:
    if auth_disabled(request):
        return _signed_in(request, "", next)
    if read_session(request) is not None:
        return RedirectResponse(safe_next(next), status_code=303)
    return page(request, "login.html", {"next": safe_next(next), "error": None})


def _same_origin(request: Request) -> bool:
    origin = request.headers.get("origin")
    return origin is None or origin == f"{request.url.scheme}://{request.url.netloc}"


@router.post("/ui/login", response_class=HTMLResponse)
def login(request: Request, data: Form) -> Response:
    token, next = data.get("token", ""), data.get("next", "/")
    if not _same_origin(request):
        return page(
            request,
            "login.html",
            {"next": safe_next(next), "error": "Sign-in from another site refused."},
            status_code=403,
        )
    hashed = token_hash(token.strip())
    found = lookup(request, hashed) if token.strip() else None
    if found is None or found[1] not in VIEW_SCOPES:
        reason = (
            "That token cannot open the dashboard (agent tokens are for agents)."
            if found is not None
            else "Unknown or revoked token. Make one with `jobcore tokens create --scope read`."
        )
        return page(
            request, "login.html", {"next": safe_next(next), "error": reason}, status_code=401
        )
    log.info("dashboard sign-in with token %s (%s)", found[0], found[1])
    return _signed_in(request, hashed, next)


@router.post("/ui/logout")
def logout(request: Request, data: Form) -> Response:
    session = read_session(request)
    if session is not None and not csrf_ok(session, data.get("csrf_token")):
        return error_page(
            request,
            session,
            403,
            "Not signed out",
            "The form's CSRF token is stale; reload and try again.",
        )
    if session is not None:
        sign_out(request, session)
    response = RedirectResponse("/ui/login", status_code=303)
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return response


def _apply(change: Callable[[Sequence[str]], list[Job]], ids: Sequence[str]) -> int:
    """Apply an all-or-nothing operator transition; on a race fall back to one job at a time."""
    try:
        return len(change(ids))
    except IllegalTransition:
        done = 0
        for job_id in ids:
            try:
                done += len(change([job_id]))
            except (IllegalTransition, JobNotFound):
                continue
        return done


def _back(request: Request, fallback: str) -> str:
    referer = request.headers.get("referer") or ""
    base = f"{request.url.scheme}://{request.url.netloc}"
    return safe_next(referer[len(base) :]) if referer.startswith(base + "/") else fallback


def _with_notice(target: str, done: str, count: int) -> str:
    path, _, query = target.partition("?")
    kept = [p for p in query.split("&") if p and not p.startswith(("done=", "n="))]
    return f"{path}?{'&'.join([*kept, urlencode({'done': done, 'n': count})])}"


@router.post("/ui/jobs/{job_id}/{verb}")
def job_action(
    request: Request,
    job_id: str,
    verb: str,
    data: Form,
    session: Viewer,
) -> Response:
    refused = refusal(request, session, data.get("csrf_token"))
    if refused:
        return error_page(request, session, 403, "Not allowed", refused)
    queue = dashboard(request).queue
    change = {"retry": queue.retry, "cancel": queue.cancel}.get(verb)
    if change is None:
        return error_page(
            request,
            session,
            404,
            "Unknown action",
            f"There is no action {verb!r}; use retry or cancel.",
        )
    try:
        if session.limits.limited:  # a job's type and queue never change
            job = queue.get(job_id)
            beyond = session.limits.refusal(session.name, verb, job.type, job.queue)
            if beyond:
                return error_page(request, session, 403, "Not allowed", beyond)
        change([job_id])
    except JobcoreError as exc:
        return error_page(request, session, 409, f"Cannot {verb}", str(exc), f"/ui/jobs/{job_id}")
    log.info("dashboard: %s %s by token %s", verb, job_id, session.name)
    return RedirectResponse(
        _with_notice(_back(request, f"/ui/jobs/{job_id}"), verb, 1), status_code=303
    )


def _bulk_filter(action: str, flt: JobFilter) -> JobFilter:
    return flt.narrowed(RETRYABLE if action == "retry" else CANCELLABLE)


def _beyond(session: Session, flt: JobFilter) -> str | None:
    """Why a bulk action by `flt` is beyond the session's token (`grants.Limits`)."""
    named = flt.for_hub()
    return session.limits.filter_refusal(session.name, named.types, named.queues)


@router.get("/ui/bulk", response_class=HTMLResponse)
def bulk_confirm(request: Request, session: Viewer, action: str = "") -> HTMLResponse:
    if action not in VERBS:
        return error_page(
            request,
            session,
            400,
            "Unknown action",
            "Bulk actions are retry and cancel.",
            "/ui/jobs",
        )
    try:
        flt = JobFilter.from_params(request.query_params)
    except BadFilter as exc:
        return error_page(request, session, 400, "Bad filter", str(exc), "/ui/jobs")
    if not session.can_act:
        return error_page(
            request,
            session,
            403,
            "Not allowed",
            f"A {session.scope!r} token cannot change jobs.",
            "/ui/jobs",
        )
    beyond = _beyond(session, flt)
    if beyond:
        return error_page(request, session, 403, "Not allowed", beyond, f"/ui/jobs?{flt.query()}")
    target = _bulk_filter(action, flt)
    count = dashboard(request).reader.count(target) if target.statuses else 0
    return page(
        request,
        "confirm.html",
        {
            "session": session,
            "active": "jobs",
            "verb": VERBS[action],
            "count": count,
            "description": target.describe(),
            "post_url": "/ui/bulk",
            # no filter: every job the action applies to, said explicitly
            "hidden": [
                ("action", action),
                *(target.pairs() if not flt.empty else [("all", "true")]),
            ],
            "danger": action == "cancel",
            "back_url": f"/ui/jobs?{flt.query()}",
        },
    )


@router.post("/ui/bulk")
def bulk(
    request: Request,
    data: Form,
    session: Viewer,
) -> Response:
    refused = refusal(request, session, data.get("csrf_token"))
    if refused:
        return error_page(request, session, 403, "Not allowed", refused)
    action = data.get("action", "")
    if action not in VERBS:
        return error_page(
            request,
            session,
            400,
            "Unknown action",
            "Bulk actions are retry and cancel.",
            "/ui/jobs",
        )
    try:
        given = JobFilter.from_params(data)
    except BadFilter as exc:
        return error_page(request, session, 400, "Bad filter", str(exc), "/ui/jobs")
    if given.empty and data.get("all") != "true":
        return error_page(
            request,
            session,
            400,
            "No filter",
            "A bulk action needs a filter, or all=true to act on every job.",
            "/ui/jobs",
        )
    flt = _bulk_filter(action, given)
    beyond = _beyond(session, flt)
    if beyond:
        return error_page(request, session, 403, "Not allowed", beyond, "/ui/jobs")
    # nothing to do when the filter's statuses leave none this action applies to
    changed = bulk_change(hub_of(request), flt.for_hub(), action)["changed"] if flt.statuses else 0
    log.info(
        "dashboard: bulk %s of %d job(s) (%s) by token %s",
        action,
        changed,
        flt.describe(),
        session.name,
    )
    shown = replace(flt, statuses=())  # the changed jobs have left the statuses they had
    return RedirectResponse(
        _with_notice(f"/ui/jobs?{shown.query()}", action, changed), status_code=303
    )


_GROUP_LIMITED = (
    "This token may act only on some job types or queues; a group spans all of them. "
    "Retry its jobs from the jobs page, filtered by one of your types and queues."
)


def _with_signature(request: Request, wanted: str) -> Iterator[list[str]]:
    """Ids of failed jobs whose error has this signature, in batches."""
    for batch in dashboard(request).reader.failures():
        ids = [job_id for job_id, error in batch if error_signature(error) == wanted]
        if ids:
            yield ids


@router.get("/ui/dead-letters/retry", response_class=HTMLResponse)
def retry_group_confirm(request: Request, session: Viewer, signature: str = "") -> HTMLResponse:
    if not session.can_act:
        return error_page(
            request, session, 403, "Not allowed", f"A {session.scope!r} token cannot change jobs."
        )
    if session.limits.limited:
        return error_page(request, session, 403, "Not allowed", _GROUP_LIMITED, "/ui/dead-letters")
    count = sum(len(ids) for ids in _with_signature(request, signature))
    return page(
        request,
        "confirm.html",
        {
            "session": session,
            "active": "dead",
            "verb": "Retry",
            "count": count,
            "description": f"failed with “{signature}”",
            "post_url": "/ui/dead-letters/retry",
            "hidden": [("signature", signature)],
            "danger": False,
            "back_url": "/ui/dead-letters",
        },
    )


@router.post("/ui/dead-letters/retry")
def retry_group(request: Request, data: Form, session: Viewer) -> Response:
    refused = refusal(request, session, data.get("csrf_token"))
    if refused:
        return error_page(request, session, 403, "Not allowed", refused)
    if session.limits.limited:
        return error_page(request, session, 403, "Not allowed", _GROUP_LIMITED, "/ui/dead-letters")
    wanted = data.get("signature", "")
    queue = dashboard(request).queue
    changed = sum(_apply(queue.retry, ids) for ids in _with_signature(request, wanted))
    log.info(
        "dashboard: retried %d failed job(s) with signature %r by token %s",
        changed,
        wanted,
        session.name,
    )
    return RedirectResponse(_with_notice("/ui/dead-letters", "retry", changed), status_code=303)
