"""Turning an enqueue body into a validated `NewJob` (the same rules as `Queue.enqueue`)."""

from __future__ import annotations

from datetime import UTC
from typing import Any

from jobcore.models import NewJob
from jobcore.queue import Queue
from jobcore.timeutil import parse_duration
from jobcore_http.errors import ApiError
from jobcore_http.models import EnqueueIn

MAX_TIME_MS = 253402300799999  # 9999-12-31T23:59:59.999Z


def build_job(
    queue: Queue, body: EnqueueIn, header_key: str | None = None, *, parent_id: str | None = None
) -> NewJob:
    if body.payload is not None and body.params is not None:
        raise ApiError(400, "give payload or params (its alias), not both")
    payload: dict[str, Any] = dict(body.payload if body.payload is not None else body.params or {})
    if body.solver_url is not None or body.solver_checksum is not None:
        payload = {
            key: value
            for key, value in (
                ("url", body.solver_url),
                ("sha256", body.solver_checksum),
                ("params", payload),
            )
            if value is not None
        }
    if body.timeout is not None and body.max_runtime_ms is not None:
        raise ApiError(400, "give timeout (seconds) or max_runtime_ms, not both")
    timeout = body.timeout if body.max_runtime_ms is None else body.max_runtime_ms / 1000
    delay: float | None = None
    if body.delay is not None:
        try:
            delay = parse_duration(body.delay)
        except ValueError as exc:
            raise ApiError(400, f"delay: {exc}") from None
    run_at: int | None = None
    if body.run_at is not None:
        moment = body.run_at if body.run_at.tzinfo else body.run_at.replace(tzinfo=UTC)
        run_at = int(moment.timestamp() * 1000)
        if not 0 <= run_at <= MAX_TIME_MS:
            raise ApiError(400, "run_at must be between 1970 and 9999")
    if delay is not None and delay * 1000 > MAX_TIME_MS / 2:
        raise ApiError(400, "delay is too long")
    key = body.idempotency_key if body.idempotency_key is not None else header_key
    return queue.build(
        body.type,
        payload,
        queue=body.queue,
        priority=body.priority,
        delay=delay,
        run_at=run_at,
        max_attempts=body.max_attempts,
        timeout=timeout,
        idempotency_key=key,
        parent_id=parent_id,
    )
