"""A `jobcore_execute_job` wrapper that makes a shutdown reach an async handler's task before
its first step (JOBCORE_PLUGINS=...,jobcore_async_race_plugin; with jobcore_async_plugin).

For a job whose payload says `"how": "stop_before_start"`, on a worker run with
`--shutdown-timeout 0`: it signals its own process (SIGTERM) and holds the event loop until
the worker's main thread is stopping that loop (it waits in `AsyncHandlers.stop`), so the
loop's stop comes before the handler task's first step. That is the moment a real shutdown
may hit when it meets many jobs starting at once; here it is made certain. It notes
`race-set` (or `race-missed`) in the payload's log.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Generator
from typing import Any

from jobcore import Job, JobContext, hookimpl


def _stopping_the_loop() -> bool:
    """The main thread waits in `AsyncHandlers.stop` for the loop's thread to end (it has
    asked the loop to stop by then)."""
    frame = sys._current_frames().get(threading.main_thread().ident or 0)
    names = []
    while frame is not None:
        names.append(frame.f_code.co_qualname)
        frame = frame.f_back
    return "AsyncHandlers.stop" in names and "Thread.join" in names


def _note(path: str, event: str, job: Job) -> None:
    with open(path, "a") as out:
        out.write(f"{event} {job.id}\n")


@hookimpl(wrapper=True)
def jobcore_execute_job(job: Job, ctx: JobContext) -> Generator[None, Any, Any]:
    result = yield
    payload = job.payload if isinstance(job.payload, dict) else {}
    if payload.get("how") == "stop_before_start":
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 60
        while not _stopping_the_loop() and time.monotonic() < deadline:
            time.sleep(0.01)  # blocks the loop on purpose: nothing on it may run meanwhile
        _note(payload["log"], "race-set" if _stopping_the_loop() else "race-missed", job)
    return result
