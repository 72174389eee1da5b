"""`ctx.heartbeat()` requests coalesce: at most one lease extension per lease/20.

Before, every call was a write transaction of its own: a handler heartbeating once per
item (every 0.5ms) made 2,255 lease-extending transactions in 3s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from beating import BeatsPayload, beats

from jobcore import JobStatus, JobType, Queue, Worker, hookimpl

MakeQueue = Callable[..., Queue]


class Beats:
    @hookimpl
    def jobcore_register_job_types(self, register: Callable[[JobType], None]) -> None:
        register(JobType(name="beats", payload_model=BeatsPayload, handler=beats))


def _run_counting_extensions(queue: Queue, lease: float, **payload: Any) -> tuple[int, int]:
    """Run one `beats` job to its end; answer its heartbeat calls and the extensions made."""
    job = queue.enqueue("beats", payload).job
    extensions = [0]
    extend = queue.storage.extend_leases

    def counted(*args: Any, **kwargs: Any) -> dict[str, bool]:
        extensions[0] += 1
        return extend(*args, **kwargs)

    queue.storage.extend_leases = counted  # type: ignore[method-assign]
    Worker(queue, concurrency=1, lease=lease, until_empty=True).run()
    done = queue.get(job.id)
    assert done.status is JobStatus.COMPLETED, done.last_error
    assert isinstance(done.result, int)
    return done.result, extensions[0]


def test_a_handler_heartbeating_per_item_costs_one_extension_per_lease_20th(
    jobcore_make_queue: MakeQueue,
) -> None:
    queue = jobcore_make_queue(Beats())
    # lease 60s: requests coalesce over 3s; the regular heartbeat would come at 15s
    calls, extensions = _run_counting_extensions(queue, 60, seconds=1.5, every=0.0005)
    assert calls > 500
    assert extensions == 1  # the first request, served at once


def test_heartbeat_requests_are_still_served_every_lease_20th(
    jobcore_make_queue: MakeQueue,
) -> None:
    queue = jobcore_make_queue(Beats())
    # lease 2s: regular heartbeats every 0.5s (3 in 1.5s); requests every 0.1s (about 15)
    calls, extensions = _run_counting_extensions(queue, 2, seconds=1.5, every=0.001)
    assert calls > 200
    assert 6 <= extensions <= 20, extensions
