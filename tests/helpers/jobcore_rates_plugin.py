"""Job types with rate limits for the rate-limit tests (DESIGN §16), loadable in worker
subprocesses with JOBCORE_PLUGINS=jobcore_rates_plugin."""

from __future__ import annotations

from jobcore import JobContext, Payload, RetryAfter, job_type


class Call(Payload):
    customer: str = ""
    push: float = 0.0  # the first attempt raises RetryAfter(push, limit=True)


@job_type("rated", rate="10/1s")
def rated(payload: Call, ctx: JobContext) -> None:
    """At most 10 starts in any second, in the whole store."""


@job_type("rated_key", rate=(2, 1.0), concurrency_key="customer")
def rated_key(payload: Call, ctx: JobContext) -> None:
    """At most 2 starts in any second per customer."""


@job_type("pushy", rate="5/1s")
def pushy(payload: Call, ctx: JobContext) -> None:
    """A rate-limited API that says to come back later, once."""
    if payload.push and ctx.job.attempts <= 1:
        raise RetryAfter(payload.push, limit=True)


@job_type("pushy_late")
def pushy_late(payload: Call, ctx: JobContext) -> None:
    """Its first attempt runs until asked to stop (its lease lost, say), then asks to hold
    its rate limit for `push` seconds: for a claim already given up. Later attempts fail."""
    if ctx.job.attempts <= 1:
        ctx.wait(300)
        raise RetryAfter(payload.push, limit=True)
    raise RuntimeError("a plain failure")


@job_type("unrated")
def unrated(payload: Call, ctx: JobContext) -> None:
    """No rate limit of its own (a queue's may apply)."""
