"""Tokens over HTTP (scope `admin`): list, create (shown once), revoke."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request, Response

from jobcore_http.auth import hub_of, require
from jobcore_http.errors import ApiError
from jobcore_http.models import ErrorOut, TokenCreatedOut, TokenCreateIn, TokensOut
from jobcore_http.tokens import create_token, token_limits

router = APIRouter(prefix="/api/tokens", dependencies=[Depends(require("admin"))])

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut} for code in (400, 401, 403, 404, 409, 422)
}


@router.get("", response_model=TokensOut, responses=ERRORS)
def list_tokens(request: Request) -> dict[str, Any]:
    """Every token's name, scope, agent and dates (never the token)."""
    return {"tokens": [t.to_json() for t in hub_of(request).store.list_tokens()]}


@router.post("", status_code=201, response_model=TokenCreatedOut, responses=ERRORS)
def new_token(request: Request, body: TokenCreateIn) -> dict[str, Any]:
    """Create a token; the answer is the only time it is shown."""
    hub = hub_of(request)
    limits = token_limits(body.scope, body.types, body.queues, hub.queue.job_type)
    token, record = create_token(hub.store, body.name, body.scope, body.agent_id, hub.now(), limits)
    return {**record.to_json(), "token": token}


@router.delete("/{name}", status_code=204, responses=ERRORS)
def revoke(request: Request, name: Annotated[str, Path(min_length=1, max_length=200)]) -> Response:
    """Revoke the token `name`; it stops working on the next request."""
    hub = hub_of(request)
    if not hub.store.revoke_token(name, hub.now()):
        raise ApiError(404, f"no active token named {name!r}")
    return Response(status_code=204)
