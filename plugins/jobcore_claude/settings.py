"""Settings of the claude plugin (no SDK import here: loading the plugin stays cheap)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from jobcore.config import PositiveSeconds


class ClaudeSettings(BaseModel):
    """`[plugins.claude]` / `JOBCORE_CLAUDE_*`."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["cli", "api"] = "cli"
    bin: str = "claude"
    base_url: str | None = None
    model: str = "claude-sonnet-4-6"
    max_tokens: int = Field(default=4096, gt=0)
    timeout: PositiveSeconds = 600.0
    stream: bool = False
