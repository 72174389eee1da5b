"""jobcore plugin `dlq`: the dead-letter view of failed jobs, and failure notifications.

Failed jobs stay in the jobs table (one source of truth); `jobcore dlq …`
lists, groups, retries, exports and purges them. Each job that ends `failed`
can trigger a shell command (the job as JSON on stdin) and/or an HTTP POST of
the job as JSON, sent in the background (`jobcore_dlq.notify`); a failing or slow
notifier is logged and never affects the queue nor holds up the worker.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import click
from pydantic import BaseModel, ConfigDict

from jobcore import Config, Job, hookimpl
from jobcore.config import PositiveSeconds
from jobcore_dlq.notify import Notifier

log = logging.getLogger("jobcore.dlq")


class DlqSettings(BaseModel):
    """`[plugins.dlq]` / `JOBCORE_DLQ_*`."""

    model_config = ConfigDict(extra="forbid")

    notify_command: str | None = None  # run through /bin/sh with the job as JSON on stdin
    notify_url: str | None = None  # receives the job as a JSON POST
    notify_timeout: PositiveSeconds = 10.0


class DlqPlugin:
    """Stateful part: the notification settings of the most recent configuration."""

    def __init__(self) -> None:
        self.settings = DlqSettings()
        self.notifier = Notifier()

    @hookimpl
    def jobcore_configure(self, config: Config) -> None:
        self.settings = config.plugin_settings("dlq", DlqSettings)

    @hookimpl
    def jobcore_register_commands(self, cli: click.Group) -> None:
        from jobcore_dlq.commands import dlq

        cli.add_command(dlq)

    @hookimpl
    def jobcore_job_failed(self, job: Job, error: str) -> None:
        settings = self.settings
        if not (settings.notify_command or settings.notify_url):
            return
        body = json.dumps({**job.to_json(), "event": "failed"}).encode()
        self.notifier.submit(settings, job.id, body)  # sent in the background

    @hookimpl
    def jobcore_worker_stopped(self, worker: str) -> None:
        self.notifier.flush()


plugin = DlqPlugin()

__all__ = ["DlqPlugin", "DlqSettings", "plugin", "summarize"]


def summarize(jobs: list[Job]) -> list[dict[str, Any]]:
    """Group failed jobs by error signature, largest group first."""
    from jobcore.timeutil import iso
    from jobcore_dlq.signature import signature

    groups: dict[str, dict[str, Any]] = {}
    for job in jobs:
        key = signature(job.last_error)
        group = groups.setdefault(
            key, {"signature": key, "count": 0, "types": set(), "example_id": job.id, "last": 0}
        )
        group["count"] += 1
        group["types"].add(job.type)
        if (job.completed_at or 0) >= group["last"]:
            group["last"], group["example_id"] = job.completed_at or 0, job.id
    return [
        {
            "signature": g["signature"],
            "count": g["count"],
            "types": sorted(g["types"]),
            "example_id": g["example_id"],
            "last_failed_at": iso(g["last"] or None),
        }
        for g in sorted(groups.values(), key=lambda g: (-g["count"], g["signature"]))
    ]
