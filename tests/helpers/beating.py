"""A handler that calls `ctx.heartbeat()` in a loop, as a handler heartbeating per item does."""

from __future__ import annotations

import time

from pydantic import Field

from jobcore import JobContext, Payload


class BeatsPayload(Payload):
    seconds: float = Field(ge=0)
    every: float = Field(default=0.001, ge=0)


def beats(payload: BeatsPayload, ctx: JobContext) -> int:
    """Call `ctx.heartbeat()` every `every` seconds for `seconds`; answer how many times."""
    end = time.monotonic() + payload.seconds
    calls = 0
    while time.monotonic() < end:
        ctx.heartbeat()
        calls += 1
        time.sleep(payload.every)
    return calls
