"""Building queues and draining them in tests."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from jobcore.config import Config
from jobcore.plugins import make_plugin_manager
from jobcore.queue import Queue
from jobcore.worker import Worker

FAST_SETTINGS: dict[str, Any] = {
    "backoff_base": 0.0,
    "backoff_jitter": 0.0,
    "poll_interval": 0.05,
    "shutdown_timeout": 5.0,
}


def make_config(
    *, plugin_settings: dict[str, dict[str, Any]] | None = None, **options: Any
) -> Config:
    """Config isolated from the environment and any ./jobcore.toml, with fast retries.

    `plugin_settings` is `{plugin: {setting: value}}`, as `[plugins.NAME]` tables.
    """
    file = {"plugins": plugin_settings} if plugin_settings else {}
    return Config(
        file=file, file_name="(test settings)", env={}, options={**FAST_SETTINGS, **options}
    )


def make_queue(
    db: str | os.PathLike[str],
    *plugins: Any,
    entrypoints: bool = False,
    modules: Iterable[str] = (),
    plugin_settings: dict[str, dict[str, Any]] | None = None,
    **options: Any,
) -> Queue:
    """A Queue on `db` whose plugin manager holds the built-ins plus exactly `plugins`.

    Each plugin is a module or object; it is registered under its `__name__`
    or class name.
    """
    named = [
        (getattr(plugin, "__name__", None) or f"{type(plugin).__name__}-{id(plugin)}", plugin)
        for plugin in plugins
    ]
    pm = make_plugin_manager(
        load_entrypoints=entrypoints,
        modules=modules,
        plugins=named,
        only=None if entrypoints else (),
    )
    return Queue(str(db), config=make_config(plugin_settings=plugin_settings, **options), pm=pm)


def drain(queue: Queue, **worker_options: Any) -> Worker:
    """Run a worker in this thread until nothing runnable remains; returns it for its stats."""
    worker_options.setdefault("until_empty", True)
    worker = Worker(queue, **worker_options)
    worker.run()
    return worker
