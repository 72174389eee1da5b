"""The example's job type: an `async def` handler calling an HTTP API with httpx.

A plugin module as it is: `JOBCORE_PLUGINS=welcome_jobs jobcore run` runs it.
"""

from __future__ import annotations

import os

import httpx

from jobcore import JobContext, Payload, RetryAfter, job_type


class Welcome(Payload):
    signup_id: int
    email: str


@job_type("send_welcome", max_attempts=5, timeout=30)
async def send_welcome(payload: Welcome, ctx: JobContext) -> dict[str, object]:
    """POST the welcome mail to the mail API (WELCOME_API_URL)."""
    url = os.environ.get("WELCOME_API_URL", "http://127.0.0.1:8025/send")
    async with httpx.AsyncClient(timeout=10) as client:
        reply = await client.post(url, json={"to": payload.email, "signup": payload.signup_id})
    if reply.status_code == 429:  # the API asks us to come back later
        raise RetryAfter(float(reply.headers.get("retry-after", "5")))
    reply.raise_for_status()  # anything else that failed: retried with backoff
    return {"status": reply.status_code, "to": payload.email}
