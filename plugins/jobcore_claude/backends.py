"""The `api` backend (the Anthropic SDK) and the errors both backends share."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import anthropic

try:  # the HTTP client under the SDK: httpx2 since anthropic 2, httpx before
    import httpx2
except ImportError:  # pragma: no cover - an older anthropic
    import httpx as httpx2  # type: ignore[no-redef]

from jobcore import Interrupted, JobcoreError, PermanentError, RetryAfter
from jobcore_claude.settings import ClaudeSettings

RETRYABLE_STATUS = {408, 409, 429, 529}
# `error.type` of an error the API may send after a 200, inside a stream (DESIGN §9: retried)
TRANSIENT_TYPES = {"overloaded_error", "rate_limit_error", "api_error", "timeout_error"}
ANSWER_LIMIT = 32 * 1024 * 1024  # bytes of an answer's body read: the cli backend's cap too
ERROR_LIMIT = 64 * 1024  # bytes of an error answer's body read (for its message)
MESSAGE_LIMIT = 500  # characters of an API error message kept in the job's error
COMPLETE = {"end_turn", "stop_sequence"}  # stop reasons of an answer that is all there


class TransientClaudeError(Exception):
    """Rate limit, overload, server error or timeout: retried with backoff."""


class _TooLarge(Exception):
    """The answer's body is larger than `ANSWER_LIMIT` (raised while it is read)."""


class _Encoded(Exception):
    """The answer came compressed although jobcore asked for none."""


def retryable_status(status: int) -> bool:
    return status in RETRYABLE_STATUS or status >= 500


_BEARER = re.compile(r"(?i)\bbearer\s+(?!\[redacted\])[^\s'\",;(){}\[\]]+")
_SPACES = re.compile(r"\s+")


def scrub(text: str, secret: str | None) -> str:
    """`text` without `secret` (the API key) or any bearer token."""
    if secret:
        text = text.replace(secret, "[redacted]")
    return _BEARER.sub("Bearer [redacted]", text)


def redact(text: str, secret: str | None = None) -> str:
    """`text` scrubbed (before it is cut: no part of a key is left), on one line, cut short."""
    text = _SPACES.sub(" ", scrub(text, secret)).strip()
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 1] + "…"


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
        # a compressed body's size is unknown until inflated: ask for none (see `_bounded`)
        default_headers={"Accept-Encoding": "identity"},
        http_client=anthropic.DefaultAsyncHttpxClient(event_hooks={"response": [_bounded]}),
    )
    call = asyncio.ensure_future(_call(client, request, settings))
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


class _Capped(httpx2.AsyncByteStream):
    """At most `limit` bytes of `inner`: past it, `_TooLarge`, or (`cut`) the end of the body."""

    def __init__(self, inner: httpx2.AsyncByteStream, limit: int, *, cut: bool) -> None:
        self._inner, self._limit, self._cut = inner, limit, cut

    async def __aiter__(self) -> AsyncIterator[bytes]:
        room = self._limit
        async for chunk in self._inner:
            if len(chunk) > room:
                if not self._cut:
                    raise _TooLarge
                if room:
                    yield chunk[:room]
                return
            room -= len(chunk)
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


async def _bounded(response: httpx2.Response) -> None:
    """Event hook: no body is read past its limit, whether the SDK or a stream reads it.

    An error's body is cut at `ERROR_LIMIT` (only its message is kept); an
    answer over `ANSWER_LIMIT` fails as soon as that is known, before it is all read.
    """
    assert isinstance(response.stream, httpx2.AsyncByteStream)
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if response.is_error:
        if encoding != "identity":  # a few KiB of gzip can inflate to GiBs: not read at all
            del response.headers["content-encoding"]
            response.stream = _Capped(response.stream, 0, cut=True)
        else:
            response.stream = _Capped(response.stream, ERROR_LIMIT, cut=True)
        return
    if encoding != "identity":
        raise _Encoded(encoding)
    length = response.headers.get("content-length", "")
    if length.isdigit() and int(length) > ANSWER_LIMIT:
        raise _TooLarge
    response.stream = _Capped(response.stream, ANSWER_LIMIT, cut=False)


async def _call(
    client: anthropic.AsyncAnthropic, request: dict[str, Any], settings: ClaudeSettings
) -> str:
    try:
        if settings.stream:
            return await _streamed(client, request, settings)
        message = await client.messages.create(**request)
    except Exception as exc:
        raise _failure(exc, client.api_key) from None
    return _answer(message, settings)


async def _streamed(
    client: anthropic.AsyncAnthropic, request: dict[str, Any], settings: ClaudeSettings
) -> str:
    """The streamed message, only once it is complete (`message_stop` seen)."""
    started = stopped = False
    async with client.messages.stream(**request) as events:
        async for event in events:
            started = started or event.type == "message_start"
            stopped = stopped or event.type == "message_stop"
        if not (started and stopped):  # a proxy's idle timeout, a dropped connection
            raise TransientClaudeError(
                "Claude API stream ended before its message was complete (no message_stop); "
                "nothing was written"
            )
        message = await events.get_final_message()
    return _answer(message, settings)


def _failure(exc: Exception, secret: str | None) -> Exception:
    """The job's error for what the SDK (or the HTTP client below it) raised.

    Text from outside (an error's message, a proxy's page) goes through `redact`:
    a gateway may quote the request's credentials back.
    """
    if isinstance(exc, (JobcoreError, TransientClaudeError)):
        return exc
    cause: BaseException | None = exc
    for _ in range(20):  # the SDK wraps what the event hook raised; a short walk of the chain
        if cause is None:
            break
        if isinstance(cause, _TooLarge):
            return PermanentError(
                f"Claude API answer is larger than {ANSWER_LIMIT // (1024 * 1024)} MiB (the "
                "limit of both backends); it was not read whole and nothing was written"
            )
        if isinstance(cause, _Encoded):
            return PermanentError(
                f"Claude API answered with Content-Encoding {cause} although jobcore asked for "
                "identity (a proxy on the way?); the answer was not read and nothing was written"
            )
        cause = cause.__cause__ or cause.__context__
    if isinstance(exc, anthropic.APIStatusError):
        return _status_failure(exc, secret)
    if isinstance(exc, anthropic.APIConnectionError):
        return TransientClaudeError(redact(f"Claude API unreachable: {exc}", secret))
    if isinstance(exc, httpx2.TransportError):  # while a stream was read: a cut, say
        return TransientClaudeError(redact(f"Claude API connection broke: {exc}", secret))
    if isinstance(exc, ValueError):  # a body that is not JSON (a proxy's page, say)
        return _malformed(redact(str(exc), secret))
    return exc


def _status_failure(exc: anthropic.APIStatusError, secret: str | None) -> Exception:
    """An error answer, or an `event: error` inside a stream (status 200), by status and type."""
    status = exc.status_code
    kind = exc.type if isinstance(exc.type, str) else None
    text = exc.api_message if isinstance(exc.api_message, str) else None
    if text is None:  # not the API's error object (a proxy's page): its start (`redact` cuts)
        text = exc.body if isinstance(exc.body, str) else exc.message
    streamed = status < 300  # the answer began (200), then an `event: error` came
    head = "Claude API error mid-stream" if streamed else f"Claude API {status}"
    message = redact(head + (f" ({kind})" if kind else "") + f": {text}", secret)
    if not (kind in TRANSIENT_TYPES if streamed else retryable_status(status)):
        return PermanentError(message)
    wait = None if streamed else _retry_after(exc.response.headers)
    if wait is not None:
        return RetryAfter(wait, message)
    return TransientClaudeError(message)


def _malformed(what: object) -> TransientClaudeError:
    return TransientClaudeError(f"Claude API answered 200 without a message: {what!s:.300}")


def _answer(message: object, settings: ClaudeSettings) -> str:
    """The text of a complete message; one cut short (max_tokens, …) is no answer."""
    text = _text_of(message)
    reason = getattr(message, "stop_reason", None)
    if reason in COMPLETE:
        return text
    if reason == "max_tokens":  # the same prompt is cut at the same length again: not retried
        raise PermanentError(
            f"Claude's answer was cut at max_tokens={settings.max_tokens} (stop_reason "
            "max_tokens); raise [plugins.claude] max_tokens / JOBCORE_CLAUDE_MAX_TOKENS and "
            "retry the job; nothing was written"
        )
    if reason is None:
        raise TransientClaudeError(
            "Claude API answered a message without a stop_reason (incomplete); nothing was written"
        )
    raise PermanentError(
        f"Claude stopped before the end of an answer (stop_reason {reason!s:.40}); "
        "nothing was written"
    )


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
