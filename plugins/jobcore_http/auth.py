"""Authentication and scopes, in one place every route (and the dashboard) uses.

`require(scope)` is the FastAPI dependency each route declares; it resolves
the caller from `Authorization: Bearer …` (or from any resolver registered
in `hub.principal_resolvers`, such as the dashboard's session cookie) and
answers 401 (no or bad token) or 403 (scope too small). `acting_as` checks an
agent route's `worker_id` against the token's agent id.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import Request

from jobcore_http.errors import ApiError
from jobcore_http.hub import Hub
from jobcore_http.tokens import ANONYMOUS_ADMIN, Principal, Scope

_CHALLENGE = {"WWW-Authenticate": "Bearer"}


def hub_of(request: Request) -> Hub:
    hub: Hub = request.app.state.hub
    return hub


def bearer_token(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(401, "Authorization header must be 'Bearer TOKEN'", _CHALLENGE)
    return token.strip()


def principal_of(request: Request) -> Principal | None:
    """Who is calling, or None when no credentials came with the request."""
    hub = hub_of(request)
    if hub.settings.insecure_no_auth:
        return ANONYMOUS_ADMIN
    token = bearer_token(request)
    if token is not None:
        principal = hub.authenticate(token)
        if principal is None:
            raise ApiError(401, "unknown or revoked token", _CHALLENGE)
        return principal
    for resolve in hub.principal_resolvers:
        found = resolve(request)
        if found is not None:
            return found
    return None


def require(scope: Scope) -> Callable[[Request], Awaitable[Principal]]:
    """Dependency: the caller's principal, which must hold `scope`."""
    return require_any(scope)


def require_any(*scopes: Scope) -> Callable[[Request], Awaitable[Principal]]:
    """Dependency: the caller's principal, which must hold one of `scopes`."""

    async def dependency(request: Request) -> Principal:
        principal = principal_of(request)
        if principal is None:
            raise ApiError(401, "this route needs a token: Authorization: Bearer TOKEN", _CHALLENGE)
        if not any(principal.allows(scope) for scope in scopes):
            needed = " or ".join(repr(scope) for scope in scopes)
            raise ApiError(
                403,
                f"token {principal.name!r} has scope {principal.scope!r}; this route needs {needed}",
            )
        request.state.principal = principal
        return principal

    dependency.__name__ = "require_" + "_or_".join(scopes)
    return dependency


def acting_as(principal: Principal, worker_id: str) -> None:
    """403 unless this principal may act for `worker_id` (agent tokens: only their own)."""
    if not principal.may_act_as(worker_id):
        raise ApiError(
            403,
            f"token {principal.name!r} acts for agent {principal.agent_id!r}, not {worker_id!r}: "
            f"start the agent with --worker-id {principal.agent_id} (an agent's worker id "
            "defaults to its host name), or give it a token made for its own worker id "
            f"(jobcore tokens create --scope agent --name {worker_id})",
        )


def agent_id_of(principal: Principal) -> str:
    """The worker id claims are made under when the route names none (`GET /api/queue`)."""
    return principal.agent_id or "queue"
