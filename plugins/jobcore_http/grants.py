"""Tokens limited to job types and queues: the rules live in `jobcore.grants` (a backend
stores a token's limits as part of the hub's state, `jobcore.storage.hub_state`)."""

from __future__ import annotations

from jobcore.grants import MAX_NAMES, UNLIMITED, Limits, parse_names

__all__ = ["MAX_NAMES", "UNLIMITED", "Limits", "parse_names"]
