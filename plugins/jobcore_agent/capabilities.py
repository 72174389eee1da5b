"""What an agent tells the hub about itself at registration."""

from __future__ import annotations

import os
import socket
from typing import Any


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def ram_gb() -> float:
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0.0
    return round(total / 2**30, 1)


def default_worker_id() -> str:
    """Stable across restarts (so an outbox left by a previous run is still ours): the host name."""
    return socket.gethostname()


def capabilities(
    *, worker_id: str, types: tuple[str, ...], tags: tuple[str, ...]
) -> dict[str, Any]:
    """The body of `POST /api/workers/register`."""
    return {
        "worker_id": worker_id,
        "name": socket.gethostname(),
        "cores": cpu_count(),
        "ram_gb": ram_gb(),
        "tags": list(tags),
        "types": list(types),
    }
