"""An executor's attempt at a freshly enqueued `noop` job, built as the worker builds it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from jobcore import JobContext, Queue
from jobcore.inflight import Attempt
from jobcore.models import Lease


def noop_attempt(
    queue: Queue, handler: Callable[..., Any] | None = None, *, claimed_at: float = 0.0
) -> Attempt:
    """Enqueue a `noop` job and hold it under lease `lease-<id>` of worker `w` (not claimed
    in the store); `handler` stands in for the type's own."""
    job = queue.enqueue("noop", {}).job
    job_type = queue.job_type("noop")
    if handler is not None:
        job_type = dataclasses.replace(job_type, handler=handler)
    ctx = JobContext(
        job=job,
        job_type=job_type,
        payload=None,
        worker="w",
        config=queue.config,
        build_child=queue.build,
        request_heartbeat=lambda: None,
    )
    lease = Lease(job.id, "lease-" + job.id, "w", job)
    return Attempt(job=job, lease=lease, ctx=ctx, claimed_at=claimed_at)
