"""jobcore plugin `claude`: `claude_extraction` asks Claude and writes the answer to a file."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from jobcore_files import check_target, write_file
from jobcore_files.paths import check_path
from jobcore_files.writer import sha256
from pydantic import AliasChoices, Field, field_validator, model_validator

from jobcore import Config, JobContext, JobType, Payload, hookimpl
from jobcore.plugins import require
from jobcore_claude.settings import ClaudeSettings

require("anthropic", extra="claude")

__all__ = ["ClaudeExtraction", "ClaudeSettings"]


def prompt_sha256(prompt: str) -> str:
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()


class ClaudeExtraction(Payload):
    prompt: str = Field(min_length=1)
    target_path: str = Field(
        min_length=1, validation_alias=AliasChoices("target_path", "targetPath")
    )
    requirement_id: str | None = Field(
        default=None, min_length=1, validation_alias=AliasChoices("requirement_id", "requirementId")
    )
    prompt_hash: str | None = Field(
        default=None, validation_alias=AliasChoices("prompt_hash", "promptHash")
    )

    @field_validator("prompt")
    @classmethod
    def _not_blank(cls, prompt: str) -> str:
        if not prompt.strip():  # neither backend can send it: the API answers 400, the CLI fails
            raise ValueError("the prompt is only whitespace; give it some text")
        return prompt

    @model_validator(mode="after")
    def _hash_matches(self) -> ClaudeExtraction:
        actual = prompt_sha256(self.prompt)
        if self.prompt_hash is not None and self.prompt_hash.lower() != actual:
            raise ValueError(f"prompt_hash does not match the prompt (its sha256 is {actual})")
        self.prompt_hash = actual
        return self


def idempotency_key(payload: ClaudeExtraction) -> str | None:
    return payload.requirement_id or payload.prompt_hash


def run_extraction(payload: ClaudeExtraction, ctx: JobContext) -> dict[str, Any]:
    settings = ctx.config.plugin_settings("claude", ClaudeSettings)
    # a bad or refused target fails before spending a call (the files plugin's own rules)
    check_target(ctx.config, payload.target_path, field="target_path")

    def should_stop() -> str | None:
        return ctx.stop_reason

    if settings.backend == "api":
        from jobcore_claude.backends import ask_api  # imports the SDK on first use

        text = ask_api(payload.prompt, settings, should_stop=should_stop)
    else:
        from jobcore_claude.cli import ask_cli

        text = ask_cli(payload.prompt, settings, should_stop=should_stop)
    data = text.encode("utf-8")
    ctx.check_stop()  # nothing is written once a stop was asked; the write is the last step
    write_file(ctx.config, payload.target_path, data, overwrite=True, field="target_path")
    return {
        "target_path": payload.target_path,
        "bytes": len(data),
        "sha256": sha256(data),
        "backend": settings.backend,
        "model": settings.model,
    }


@hookimpl
def jobcore_configure(config: Config) -> None:
    """Validate `[plugins.claude]` / `JOBCORE_CLAUDE_*` at start, not on every job."""
    config.plugin_settings("claude", ClaudeSettings)


@hookimpl
def jobcore_register_job_types(register: Callable[[JobType], None]) -> None:
    register(
        JobType(
            name="claude_extraction",
            payload_model=ClaudeExtraction,
            handler=run_extraction,
            idempotency_key=idempotency_key,
            check=lambda payload, config: check_path(payload.target_path, config, "target_path"),
            timeout=900,
            max_attempts=5,
            description="ask Claude (Code CLI or API) and write the answer atomically to a file",
        )
    )
