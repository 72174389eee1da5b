"""In-process wake-ups: an enqueue commit wakes workers of the same database at once."""

from __future__ import annotations

import threading
from collections.abc import Callable

_lock = threading.Lock()
_listeners: dict[str, set[Callable[[], None]]] = {}


def subscribe(key: str, callback: Callable[[], None]) -> None:
    with _lock:
        _listeners.setdefault(key, set()).add(callback)


def unsubscribe(key: str, callback: Callable[[], None]) -> None:
    with _lock:
        listeners = _listeners.get(key)
        if listeners is not None:
            listeners.discard(callback)
            if not listeners:
                del _listeners[key]


def every_change(key: str) -> str:
    """The key a store that pushes its changes also notifies for changes that bring no
    work (claims, outcomes), which `key`'s subscribers (workers) do not hear of."""
    return f"{key}#every-change"


def notify(key: str) -> None:
    with _lock:
        listeners = list(_listeners.get(key, ()))
    for callback in listeners:
        callback()
