"""Two ways to ask Claude: the Anthropic SDK (`api`) and Claude Code headless (`cli`)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable

import anthropic
from jobcore_shell.runner import run_command

from jobcore import PermanentError, RetryAfter
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


def ask_api(prompt: str, settings: ClaudeSettings) -> str:
    """Messages API through the official SDK; the queue, not the SDK, does the retrying."""
    api_key = os.environ.get("ANTHROPIC_API_KEY")
    if not api_key:
        raise PermanentError("ANTHROPIC_API_KEY is not set; the api backend needs it")
    request = {
        "model": settings.model,
        "max_tokens": settings.max_tokens,
        "messages": [{"role": "user", "content": prompt}],
    }
    try:
        with anthropic.Anthropic(
            api_key=api_key, base_url=settings.base_url, max_retries=0, timeout=settings.timeout
        ) as client:
            if settings.stream:
                with client.messages.stream(**request) as stream:  # type: ignore[arg-type]
                    return stream.get_final_text()
            message = client.messages.create(**request)  # type: ignore[call-overload]
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


def ask_cli(prompt: str, settings: ClaudeSettings, should_stop: Callable[[], str | None]) -> str:
    """`claude -p PROMPT --output-format json`; its JSON `result` is the text."""
    program = shutil.which(settings.bin)
    if program is None:
        raise PermanentError(
            f"Claude Code binary {settings.bin!r} not found on PATH; install "
            "@anthropic-ai/claude-code or set [plugins.claude] bin / JOBCORE_CLAUDE_BIN"
        )
    env = {"CLAUDE_CODE_MAX_RETRIES": os.environ.get("CLAUDE_CODE_MAX_RETRIES", "0")}
    if settings.base_url:
        env["ANTHROPIC_BASE_URL"] = settings.base_url
    finished = run_command(
        [program, "-p", prompt, "--output-format", "json", "--model", settings.model],
        shell=False,
        cwd=None,
        env=env,
        timeout=settings.timeout,
        output_limit=32 * 1024 * 1024,
        should_stop=should_stop,
    )
    if finished.stopped is not None:
        raise TransientClaudeError(
            f"claude stopped ({finished.stopped}) after {finished.duration_ms:.0f}ms"
        )
    stdout = finished.stdout.text()
    try:
        answer = json.loads(stdout)
    except json.JSONDecodeError:
        raise TransientClaudeError(
            f"claude exited {finished.exit_code} without JSON output; stderr: {finished.stderr.text()[-500:]}"
        ) from None
    if answer.get("is_error") or finished.exit_code != 0:
        status = answer.get("api_error_status")
        text = f"claude failed (status {status}): {str(answer.get('result'))[:500]}"
        if isinstance(status, int) and not retryable_status(status):
            raise PermanentError(text)
        raise TransientClaudeError(text)
    return str(answer.get("result", ""))
