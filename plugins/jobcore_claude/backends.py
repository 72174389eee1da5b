"""The `api` backend (the Anthropic SDK) and the errors both backends share."""

from __future__ import annotations

import os
import threading
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

    The call runs on a helper thread so that a stop (cancel, timeout, shutdown, a
    lost lease) or the total deadline `settings.timeout` ends the attempt at once:
    the connection is closed and the call abandoned; its answer, should one still
    arrive, is dropped, never returned.
    """
    api_key = os.environ.get("ANTHROPIC_API_KEY")
    if not api_key:
        raise PermanentError("ANTHROPIC_API_KEY is not set; the api backend needs it")
    request = {
        "model": settings.model,
        "max_tokens": settings.max_tokens,
        "messages": [{"role": "user", "content": prompt}],
    }
    client = anthropic.Anthropic(
        api_key=api_key,
        base_url=settings.base_url,
        max_retries=0,
        timeout=anthropic.Timeout(settings.timeout, connect=min(CONNECT_TIMEOUT, settings.timeout)),
    )
    abandoned = threading.Event()
    done = threading.Event()
    outcome: dict[str, Any] = {}

    def call() -> None:
        try:
            outcome["text"] = _call(client, request, settings.stream, abandoned)
        except BaseException as exc:  # handed to the handler's thread below
            outcome["error"] = exc
        finally:
            done.set()

    threading.Thread(target=call, name="jobcore-claude-api", daemon=True).start()
    deadline = time.monotonic() + settings.timeout
    try:
        while not done.wait(POLL):
            reason = should_stop()
            if reason is not None:
                raise Interrupted(f"stopped: {reason}")
            if time.monotonic() >= deadline:
                raise TransientClaudeError(
                    f"Claude API did not answer within {settings.timeout:g}s (setting timeout)"
                )
    finally:
        if not done.is_set():
            abandoned.set()
        client.close()  # also drops a connection the abandoned call still reads from
    if "error" in outcome:
        raise outcome["error"]
    return str(outcome["text"])


def _call(
    client: anthropic.Anthropic, request: dict[str, Any], stream: bool, abandoned: threading.Event
) -> str:
    try:
        if stream:
            parts: list[str] = []
            with client.messages.stream(**request) as events:
                for text in events.text_stream:
                    if abandoned.is_set():
                        return ""
                    parts.append(text)
            return "".join(parts)
        message = client.messages.create(**request)
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
    return "".join(block.text for block in message.content if block.type == "text")
