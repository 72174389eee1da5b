"""The hub's settings: `[plugins.http]` in the config file, `JOBCORE_HTTP_*` in the environment."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from jobcore.config import PositiveSeconds

_SIZE = re.compile(r"^\s*(\d+)\s*(b|kb|kib|mb|mib|gb|gib)?\s*$", re.IGNORECASE)
_UNITS = {
    None: 1,
    "b": 1,
    "kb": 1000,
    "kib": 1024,
    "mb": 1000**2,
    "mib": 1024**2,
    "gb": 1000**3,
    "gib": 1024**3,
}


def parse_size(value: Any) -> int:
    """`1MiB`, `512kb`, `1048576` -> bytes; raises ValueError naming the accepted forms."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a size")
    if isinstance(value, int):
        return value
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError(f"{value!r} is not a size; use bytes or e.g. 512KiB, 1MiB, 2MB")
    unit = match.group(2).lower() if match.group(2) else None
    return int(match.group(1)) * _UNITS[unit]


Size = Annotated[int, BeforeValidator(parse_size), Field(gt=0)]


class HttpSettings(BaseModel):
    """`[plugins.http]` / `JOBCORE_HTTP_<NAME>`; `jobcore serve` options override them."""

    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 8080
    max_body: Size = 1024 * 1024
    insecure_no_auth: bool = False
    max_wait: Annotated[float, Field(ge=0, le=30)] = 30.0  # longest claim long-poll, seconds
    poll_wait: Annotated[float, Field(ge=0, le=30)] = 25.0  # told to agents at register
    max_claims_per_agent: Annotated[int, Field(ge=1, le=1000)] = 4  # concurrent long-polls
    max_jobs_per_claim: Annotated[int, Field(ge=1, le=1000)] = 100
    timeout_check_interval: PositiveSeconds = 1.0  # how often remote claims' runtime is checked
    sse_retry: PositiveSeconds = 2.0  # the `retry:` hint of event streams
    sse_keepalive: PositiveSeconds = 15.0  # comment lines on idle streams
    # open event streams per token (dashboard sessions and no-auth: per client address);
    # one more ends the oldest
    max_streams_per_token: Annotated[int, Field(ge=1, le=100_000)] = 8
    shutdown_timeout: PositiveSeconds = 30.0  # wait for in-flight requests at SIGTERM
    # bounds on what any client can hold (README, "Limits"): open connections, time to send
    # a request head (request line and headers) and to send a body, size of a head
    max_connections: Annotated[int, Field(ge=8, le=1_000_000)] = 1000
    head_timeout: PositiveSeconds = 10.0
    body_timeout: PositiveSeconds = 30.0
    max_header_bytes: Size = 32 * 1024
    artifacts_dir: str | None = None  # default: beside the database (`<db>.artifacts`)
    tls_cert: str | None = None  # PEM certificate (chain): serve HTTPS
    tls_key: str | None = None  # its PEM private key
