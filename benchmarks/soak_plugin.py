"""The `soak` job type: sleeps `ms`, recording each run to a per-worker append-only file.

The file is `$JOBCORE_SOAK_DIR/runs-<worker>.log`; each run appends a start line
`S job attempt lease worker start_ns` before its handler sleeps and an end line
`E job attempt lease worker start_ns end_ns` after it (one `write` on an
O_APPEND descriptor each, so concurrent runs never interleave a line).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from pydantic import Field

from jobcore import JobContext, JobType, Payload, hookimpl


class SoakPayload(Payload):
    ms: int = Field(default=0, ge=0, le=60_000)


def _append(worker: str, line: str) -> None:
    folder = os.environ["JOBCORE_SOAK_DIR"]
    fd = os.open(
        os.path.join(folder, f"runs-{worker}.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644
    )
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def soak(payload: SoakPayload, ctx: JobContext) -> None:
    """Record the start, sleep `ms` (waking early on a stop), record the end."""
    lease = getattr(ctx.job, "lease_id", None) or "-"
    key = f"{ctx.job.id} {ctx.attempt} {lease} {ctx.worker}"
    start = time.time_ns()
    _append(ctx.worker, f"S {key} {start}\n")
    if payload.ms:
        ctx.wait(payload.ms / 1000)
        ctx.check_stop()
    _append(ctx.worker, f"E {key} {start} {time.time_ns()}\n")


@hookimpl
def jobcore_register_job_types(register: Callable[[JobType], None]) -> None:
    register(JobType(name="soak", payload_model=SoakPayload, handler=soak))
