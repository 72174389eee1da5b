"""Who may see and do what: one place every dashboard route consults (Oban's resolver)."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import parse_qsl, quote

from fastapi import Depends, HTTPException, Request
from starlette.datastructures import ImmutableMultiDict

from jobcore_http.dashboard.session import Session, csrf_ok, read_session


def _login_redirect(request: Request) -> HTTPException:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return HTTPException(
        status_code=303,
        detail="sign in first",
        headers={"Location": f"/ui/login?next={quote(target, safe='')}"},
    )


def viewer(request: Request) -> Session:
    """Dependency of every page: the signed-in session, else a redirect to the sign-in page."""
    session = read_session(request)
    if session is None:
        raise _login_redirect(request)
    return session


def refusal(request: Request, session: Session, csrf_token: str | None) -> str | None:
    """Why this action is refused (the scope cannot act, or the CSRF token does not match)."""
    if not session.can_act:
        return (
            f"A {session.scope!r} token cannot change jobs; sign in with a produce or admin token."
        )
    if not csrf_ok(session, csrf_token or request.headers.get("x-csrf-token")):
        return "The form's CSRF token is missing or stale; reload the page and try again."
    return None


def safe_next(target: str | None) -> str:
    """Only same-site paths are followed after sign-in."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


MAX_FORM_BYTES = 64 * 1024


async def form(request: Request) -> ImmutableMultiDict[str, str]:
    """The URL-encoded form of a POST (the dashboard's forms send nothing else)."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise HTTPException(status_code=413, detail="form too large")
    try:
        pairs = parse_qsl(body.decode(), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError:
        raise HTTPException(status_code=400, detail="form is not UTF-8") from None
    return ImmutableMultiDict(pairs)


Viewer = Annotated[Session, Depends(viewer)]
"""A route parameter: the signed-in session (else a redirect to sign in)."""

Form = Annotated[ImmutableMultiDict[str, str], Depends(form)]
"""A route parameter: the POSTed form."""
