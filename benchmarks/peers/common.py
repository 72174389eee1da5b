"""What the peer modules share: the command line, a common start time, one JSON line out.

Standard library only: it is imported by every peer's interpreter.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

Action = Callable[..., dict[str, Any] | Awaitable[dict[str, Any]]]


def wait_until(start_at: float) -> None:
    """Sleep until `start_at` (time.time()), so several processes start together."""
    while (delay := start_at - time.time()) > 0:
        time.sleep(min(delay, 0.01))


async def wait_until_async(start_at: float) -> None:
    while (delay := start_at - time.time()) > 0:
        await asyncio.sleep(min(delay, 0.01))


def latency_spacing(i: int) -> float:
    """The pause before the i-th latency job, the same as jobcore's latency producer."""
    return 0.01 + (i % 7) * 0.003


async def _wrap(awaitable: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    return await awaitable


def main(actions: dict[str, Action], use_uvloop: bool = False) -> None:
    """Run `ACTION DSN SCHEMA ARGS...` from argv and print its result as one JSON line.

    `use_uvloop` follows the peer's own runner (its CLI runs on uvloop when installed).
    """
    if len(sys.argv) < 4 or sys.argv[1] not in actions:
        raise SystemExit(f"usage: ACTION DSN SCHEMA [ARGS...]; actions: {', '.join(actions)}")
    action, dsn, schema, *args = sys.argv[1:]
    coro = actions[action](dsn, schema, *args)
    if not inspect.isawaitable(coro):
        result = coro
    elif use_uvloop:
        try:
            import uvloop
        except ImportError:
            result = asyncio.run(_wrap(coro))
        else:
            result = uvloop.run(_wrap(coro))
    else:
        result = asyncio.run(_wrap(coro))
    print(json.dumps(result), flush=True)
