"""`GET /api/events` (alias `/api/jobs/events`): server-sent events of every transition."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from jobcore_http.auth import hub_of, principal_of, require
from jobcore_http.errors import ApiError
from jobcore_http.events import EventFeed, SseEvent, StreamSlot
from jobcore_http.guard import CONNECTION
from jobcore_http.hub import Hub
from jobcore_http.models import ErrorOut
from jobcore_http.tokens import ANONYMOUS_ADMIN, Principal

router = APIRouter(prefix="/api")

DESCRIPTION = (
    "text/event-stream: `retry:` first, then one event per job transition "
    "(`job:enqueued|claimed|completed|retrying|failed|cancelled|reclaimed|released`) and "
    "worker event (`worker:registered|lost`); `id:` is a cursor for `Last-Event-ID`; "
    "`data:` the job's (or worker's) JSON."
)


MAX_EVENT_ID = 2**63 - 1  # event ids are 64-bit integers in every store


def _cursor(header: str | None, query: int | None) -> int | None:
    if header is not None:
        try:
            value = int(header.strip())
        except ValueError:
            raise ApiError(
                400, f"Last-Event-ID must be an event id (an integer), not {header!r}"
            ) from None
        if not 0 <= value <= MAX_EVENT_ID:
            raise ApiError(400, f"Last-Event-ID must be an event id from 0 to {MAX_EVENT_ID}")
        return value
    if query is not None and query > MAX_EVENT_ID:
        raise ApiError(400, f"since must be an event id from 0 to {MAX_EVENT_ID}")
    return query


RECHECK = 1.0
"""Seconds between two checks that a stream's token (or dashboard session) still holds."""


async def _still_reads(request: Request) -> bool:
    """Whether the stream's caller may still read: its token not revoked, its session not
    ended (the same resolution every request gets)."""
    try:
        principal = await run_in_threadpool(principal_of, request)
    except ApiError:
        return False
    return principal is not None and principal.allows("read")


PIECE_BYTES = 64 * 1024
"""Events are sent in pieces of about this many bytes (a larger event alone)."""


def _pieces(batch: list[SseEvent]) -> Iterator[tuple[str, int]]:
    """The batch's text in pieces of about `PIECE_BYTES`, each with its last event's seq."""
    parts: list[str] = []
    size = previous = 0
    for event in batch:
        if parts and size + event.size > PIECE_BYTES:
            yield "".join(parts), previous
            parts, size = [], 0
        parts.append(event.encode())
        size += event.size
        previous = event.seq
    if parts:
        yield "".join(parts), previous


SHARED_PRINCIPALS = (ANONYMOUS_ADMIN.name, "(dashboard session)")
"""Principals that are not one caller: their streams are counted per client address."""


def _caller(principal: Principal, request: Request) -> str:
    if principal.name in SHARED_PRINCIPALS:
        host = request.client.host if request.client else "?"
        return f"{principal.name} {host}"
    return f"token {principal.name}"


def _replace(feed: EventFeed, replaced: list[StreamSlot]) -> None:
    """End streams a newer one of their caller replaces: at once if the client is not
    taking its stream (its writes are paused), else at the stream's next turn."""
    for slot in replaced:
        drop = getattr(slot.connection, "drop_if_stalled", None)
        if callable(drop):
            drop()
    if replaced:
        feed.signal.fire()


async def _stream(
    hub: Hub, cursor: int | None, request: Request, principal: Principal
) -> AsyncIterator[str]:
    feed = hub.feed
    caller = _caller(principal, request)
    slot, replaced = feed.slots.open(
        caller, request.scope.get(CONNECTION), hub.settings.max_streams_per_token
    )
    _replace(feed, replaced)
    try:
        latest = await run_in_threadpool(feed.join)
    except BaseException:
        feed.slots.close(caller, slot)
        raise
    try:
        position = latest if cursor is None else cursor
        retry_ms = int(hub.settings.sse_retry * 1000)
        yield f"retry: {retry_ms}\n\n"
        keepalive = hub.settings.sse_keepalive
        quiet_since = next_check = time.monotonic()
        while not hub.stopping.is_set():
            if slot.ended:
                yield _REPLACED.format(limit=hub.settings.max_streams_per_token)
                return
            if time.monotonic() >= next_check:
                if not await _still_reads(request):
                    yield ": the token was revoked or the session ended\n\n"
                    return
                next_check = time.monotonic() + RECHECK
            generation = feed.signal.generation
            batch = feed.recent(position)
            if batch is None:
                batch = await run_in_threadpool(feed.load, position, 1000)
            if batch:
                # piece by piece: each send waits while the client does not take the last
                # (the transport holds one piece at most), and a client that takes nothing
                # for the guard's write timeout is dropped (it resumes with Last-Event-ID)
                for piece, last in _pieces(batch):
                    if slot.ended:
                        break
                    yield piece
                    position = last
                quiet_since = time.monotonic()
                continue
            wait = min(next_check, quiet_since + keepalive) - time.monotonic()
            fired = await feed.signal.wait(generation, max(0.0, wait))
            if not fired and time.monotonic() - quiet_since >= keepalive:
                yield ": keepalive\n\n"
                quiet_since = time.monotonic()
        yield f"retry: {retry_ms}\n: the hub is shutting down; reconnect with Last-Event-ID\n\n"
    finally:
        feed.slots.close(caller, slot)
        feed.leave()


_REPLACED = (
    ": this token opened more than max_streams_per_token={limit} event streams; "
    "its oldest ends (reconnect with Last-Event-ID)\n\n"
)


_READ = require("read")


def _events(
    request: Request,
    principal: Annotated[Principal, Depends(_READ)],
    last_event_id: Annotated[str | None, Header(max_length=40)] = None,
    since: Annotated[int | None, Query(ge=0, description="resume after this event id")] = None,
) -> StreamingResponse:
    hub = hub_of(request)
    cursor = _cursor(last_event_id, since)
    return StreamingResponse(
        _stream(hub, cursor, request, principal),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/event-stream": {}}, "description": DESCRIPTION},
    **{code: {"model": ErrorOut} for code in (400, 401, 403)},
}

router.add_api_route(
    "/events",
    _events,
    methods=["GET"],
    response_class=StreamingResponse,
    responses=RESPONSES,
    summary="Server-sent events",
)
router.add_api_route(
    "/jobs/events",
    _events,
    methods=["GET"],
    response_class=StreamingResponse,
    responses=RESPONSES,
    summary="Server-sent events (the fleet hub's path)",
    operation_id="job_events_alias",
)
