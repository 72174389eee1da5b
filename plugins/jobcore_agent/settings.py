"""Agent settings: `[plugins.agent]` in jobcore.toml and `JOBCORE_AGENT_*` (options win)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from jobcore.config import PositiveSeconds, Seconds

_SIZE = re.compile(r"^\s*(\d+)\s*(b|kb|kib|mb|mib|gb|gib)?\s*$", re.IGNORECASE)
_UNITS = {"b": 1, "kb": 10**3, "kib": 2**10, "mb": 10**6, "mib": 2**20, "gb": 10**9, "gib": 2**30}


def parse_size(value: Any) -> Any:
    """`64MiB`, `512kb`, `1048576` -> bytes; raises ValueError naming the accepted forms."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"{value!r} is not a size; use bytes or e.g. 512KiB, 64MiB, 1GB")
    if isinstance(value, int):
        return value
    match = _SIZE.match(value)
    if not match:
        raise ValueError(f"{value!r} is not a size; use bytes or e.g. 512KiB, 64MiB, 1GB")
    return int(match.group(1)) * _UNITS[(match.group(2) or "b").lower()]


Size = Annotated[int, BeforeValidator(parse_size), Field(gt=0)]


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
    # the largest hub answer read; None: 16 MiB, and for a claim 4 MiB per job asked for
    max_answer: Size | None = None
    ca_file: str | None = None  # PEM CA certificate(s) trusted for an https:// hub
    insecure_http: bool = False  # allow a plain http:// hub that is not on this machine


def split_list(text: str | None) -> tuple[str, ...]:
    """`a, b,,c` -> ("a", "b", "c")."""
    if not text:
        return ()
    return tuple(part.strip() for part in text.split(",") if part.strip())
