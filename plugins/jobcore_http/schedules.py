"""Recurring jobs in the hub: when the `cron` plugin is loaded, the hub runs a scheduler
like any worker (DESIGN §16: no leader, whichever process is up), and lists schedules."""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

from jobcore import Queue


def cron_plugin(queue: Queue) -> ModuleType | None:
    """The `jobcore_cron` module when the queue's plugin manager has it loaded."""
    for plugin in queue.pm.get_plugins():
        if getattr(plugin, "__name__", None) == "jobcore_cron":
            return plugin  # type: ignore[no-any-return]
    return None


def owner() -> str:
    return f"hub:{os.getpid()}"


def start(queue: Queue) -> None:
    cron = cron_plugin(queue)
    if cron is not None:
        cron.start_scheduler(owner(), queue)


def stop(queue: Queue) -> None:
    cron = cron_plugin(queue)
    if cron is not None:
        cron.stop_scheduler(owner())


def listing(queue: Queue) -> list[dict[str, Any]]:
    """Each schedule with its next and last run (as `jobcore schedules --json`); [] without
    the plugin."""
    cron = cron_plugin(queue)
    if cron is None:
        return []
    from jobcore_cron.commands import describe

    return describe(queue, cron.schedules_of(queue.config))
