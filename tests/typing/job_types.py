"""Checked by mypy (tox's typing env, and tests/asyncio/test_job_type_decorator.py)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, assert_type

from jobcore import JobContext, Payload, job_type


class Welcome(Payload):
    email: str
    attempts: int = 1


@job_type("send_welcome", max_attempts=5, timeout=30.0)
async def send_welcome(payload: Welcome, ctx: JobContext) -> str:
    assert_type(payload.email, str)
    await ctx.stopped()
    return payload.email


@job_type("count")
def count(payload: Welcome, ctx: JobContext) -> int:
    assert_type(payload.attempts, int)
    return payload.attempts


# the decorator hands the handler back with its own type
checked: Callable[[Welcome, JobContext], Coroutine[Any, Any, str]] = send_welcome


def call(ctx: JobContext) -> None:
    assert_type(count(Welcome(email="a@b.c"), ctx), int)
