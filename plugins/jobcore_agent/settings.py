"""Agent settings: `[plugins.agent]` in jobcore.toml and `JOBCORE_AGENT_*` (options win)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from jobcore.config import PositiveSeconds, Seconds


def default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return os.path.join(base, "jobcore", "agent")


class AgentSettings(BaseModel):
    """`[plugins.agent]` / `JOBCORE_AGENT_<NAME>`; the token only from a file or JOBCORE_AGENT_TOKEN."""

    model_config = ConfigDict(extra="forbid")

    hub: str | None = None
    token: str | None = Field(default=None, repr=False)
    token_file: str | None = None
    worker_id: str | None = None
    types: str | None = None  # comma-separated
    queues: str | None = None  # comma-separated
    tags: str | None = None  # comma-separated
    concurrency: Annotated[int, Field(ge=1, le=1024)] = 4
    cache_dir: str = Field(default_factory=default_cache_dir)
    shutdown_timeout: Seconds = 30.0
    request_timeout: PositiveSeconds = 30.0
    max_backoff: PositiveSeconds = 30.0
    ca_file: str | None = None  # PEM CA certificate(s) trusted for an https:// hub
    insecure_http: bool = False  # allow a plain http:// hub that is not on this machine


def split_list(text: str | None) -> tuple[str, ...]:
    """`a, b,,c` -> ("a", "b", "c")."""
    if not text:
        return ()
    return tuple(part.strip() for part in text.split(",") if part.strip())
