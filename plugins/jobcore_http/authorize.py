"""The routes' checks of a token's job types and queues (`grants.Limits`): 403 naming them.

Each route that enqueues or acts on jobs calls one of these with the principal its
`auth.require` dependency resolved (kept in `request.state.principal`).
"""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import Request

from jobcore.models import NewJob
from jobcore.queue import Queue
from jobcore_http.errors import ApiError
from jobcore_http.store import JobFilter
from jobcore_http.tokens import Principal


def caller(request: Request) -> Principal:
    """The principal `auth.require` resolved for this request (401 if none was)."""
    principal = getattr(request.state, "principal", None)
    if not isinstance(principal, Principal):
        raise ApiError(401, "this route needs a token: Authorization: Bearer TOKEN")
    return principal


def may_enqueue(principal: Principal, jobs: Sequence[NewJob], where: str = "") -> None:
    """403 unless the token may enqueue every one of `jobs` (as built: queue defaults
    applied). `where` prefixes the item's position, e.g. `jobs.` for `jobs.3: …`."""
    for index, job in enumerate(jobs):
        refused = principal.limits.refusal(principal.name, "enqueue", job.type, job.queue)
        if refused:
            raise ApiError(403, f"{where}{index}: {refused}" if where else refused)


def may_change(request: Request, queue: Queue, job_id: str, verb: str) -> None:
    """403 unless the calling token may `verb` (cancel, retry) this job; a token without
    limits is not asked (and the job not read) here."""
    principal = caller(request)
    if not principal.limits.limited:
        return
    job = queue.get(job_id)  # a job's type and queue never change
    refused = principal.limits.refusal(principal.name, verb, job.type, job.queue)
    if refused:
        raise ApiError(403, refused)


def may_filter(request: Request, where: JobFilter) -> None:
    """403 unless a bulk filter stays within the calling token's types and queues."""
    principal = caller(request)
    refused = principal.limits.filter_refusal(principal.name, where.types, where.queues)
    if refused:
        raise ApiError(403, refused)


def claimable(
    principal: Principal, types: Sequence[str], queues: Sequence[str]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What a claim asking for `types`/`queues` may take with this token (403 if nothing)."""
    found = principal.limits.claimable(principal.name, types, queues)
    if isinstance(found, str):
        raise ApiError(403, found)
    return found
