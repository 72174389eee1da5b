"""The `api` backend (the Anthropic SDK) and the errors both backends share."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable
from typing import Any

import anthropic

from jobcore import Interrupted, PermanentError, RetryAfter
from jobcore_claude.settings import ClaudeSettings

RETRYABLE_STATUS = {408, 409, 429, 529}


class TransientClaudeError(Exception):
    """Rate limit, overload, server error or timeout: retried with backoff."""


def retryable_status(status: int) -> bool:
    return status in RETRYABLE_STATUS or status >= 500


def _retry_after(headers: object) -> float | None:
    value = getattr(headers, "get", lambda _key: None)("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except (TypeError, ValueError):
        return None


CONNECT_TIMEOUT = 10.0  # seconds; the settings' `timeout` bounds the whole call
POLL = 0.05  # seconds between looks at should_stop while the call runs


def ask_api(prompt: str, settings: ClaudeSettings, should_stop: Callable[[], str | None]) -> str:
    """Messages API through the official SDK; the queue, not the SDK, does the retrying.

    The call runs as a task on an event loop of its own, so that a stop (cancel,
    timeout, shutdown, a lost lease) or the total deadline `settings.timeout`
    ends the attempt at once: the task is cancelled, which closes its connection
    and ends the call (a thread blocked in a read would stay until the API
    answered); nothing of the call outlives this function.
    """
    api_key = os.environ.get("ANTHROPIC_API_KEY")
    if not api_key:
        raise PermanentError("ANTHROPIC_API_KEY is not set; the api backend needs it")
    request = {
        "model": settings.model,
        "max_tokens": settings.max_tokens,
        "messages": [{"role": "user", "content": prompt}],
    }
    return asyncio.run(_ask(api_key, request, settings, should_stop))


async def _ask(
    api_key: str,
    request: dict[str, Any],
    settings: ClaudeSettings,
    should_stop: Callable[[], str | None],
) -> str:
    reason = should_stop()  # asked while the SDK was imported: send nothing
    if reason is not None:
        raise Interrupted(f"stopped: {reason}")
    client = anthropic.AsyncAnthropic(
        api_key=api_key,
        base_url=settings.base_url,
        max_retries=0,
        timeout=anthropic.Timeout(settings.timeout, connect=min(CONNECT_TIMEOUT, settings.timeout)),
    )
    call = asyncio.ensure_future(_call(client, request, settings.stream))
    deadline = time.monotonic() + settings.timeout
    try:
        while not (await asyncio.wait({call}, timeout=POLL))[0]:
            reason = should_stop()
            if reason is not None:
                raise Interrupted(f"stopped: {reason}")
            if time.monotonic() >= deadline:
                raise TransientClaudeError(
                    f"Claude API did not answer within {settings.timeout:g}s (setting timeout)"
                )
        return call.result()
    finally:
        if not call.done():
            call.cancel()  # its connection is closed as the cancellation unwinds
            with contextlib.suppress(asyncio.CancelledError, Exception):  # its outcome is moot
                await call
        await client.close()


async def _call(client: anthropic.AsyncAnthropic, request: dict[str, Any], stream: bool) -> str:
    try:
        if stream:
            parts: list[str] = []
            async with client.messages.stream(**request) as events:
                async for text in events.text_stream:
                    parts.append(text)
            return "".join(parts)
        message = await client.messages.create(**request)
    except anthropic.APIStatusError as exc:
        status = exc.status_code
        if retryable_status(status):
            wait = _retry_after(exc.response.headers)
            message_text = f"Claude API {status}: {exc.message}"
            if wait is not None:
                raise RetryAfter(wait, message_text) from None
            raise TransientClaudeError(message_text) from None
        raise PermanentError(f"Claude API {status}: {exc.message}") from None
    except (anthropic.APITimeoutError, anthropic.APIConnectionError) as exc:
        raise TransientClaudeError(f"Claude API unreachable: {exc}") from None
    except ValueError as exc:  # a body that is not JSON (a proxy's page, say)
        raise _malformed(exc) from None
    return _text_of(message)


def _malformed(what: object) -> TransientClaudeError:
    return TransientClaudeError(f"Claude API answered 200 without a message: {what!s:.300}")


def _text_of(message: object) -> str:
    """The text blocks of a message; anything else (an error object, a list) is malformed."""
    content = getattr(message, "content", None)
    if not isinstance(content, list):
        raise _malformed(message)
    parts: list[str] = []
    for block in content:
        if getattr(block, "type", None) == "text":
            text = getattr(block, "text", None)
            if not isinstance(text, str):
                raise _malformed(message)
            parts.append(text)
    return "".join(parts)
