"""Recurring jobs in the hub: when the `cron` plugin is loaded, the hub runs a scheduler
like any worker (DESIGN §16: no leader, whichever process is up), and lists schedules."""

from __future__ import annotations

import os
from collections.abc import Callable
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


def listing(queue: Queue, read: Callable[..., list[Any]] | None = None) -> list[dict[str, Any]]:
    """Each schedule with its next and last run (as `jobcore schedules --json`, with
    `due_at`, `lag_seconds` and `health` as in `jobcore stats`); [] without
    the plugin or without schedules. `read(sql)`: a read-only reader of the store (the
    dashboard's) instead of a transaction on the hub's connection."""
    cron = cron_plugin(queue)
    if cron is None:
        return []
    found = cron.schedules_of(queue.config)
    if not found:
        return []
    from jobcore_cron.commands import describe
    from jobcore_cron.health import annotate
    from jobcore_cron.store import CronStore, latest_of, read_latest

    if read is not None:
        postgres = CronStore(queue.storage).postgres  # the reader's search path: the schema
        exists = (
            "SELECT 1 WHERE to_regclass('cron_schedules') IS NOT NULL"
            if postgres
            else "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'cron_schedules'"
        )
        recorded = latest_of(read) if read(exists) else {}
    else:
        recorded = read_latest(queue.storage, queue.transaction)
    described = describe(queue, found, recorded)
    return annotate(found, described, recorded, queue.storage.now())  # due_at, health
