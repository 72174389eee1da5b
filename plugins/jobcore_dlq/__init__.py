"""jobcore plugin `dlq`: the dead-letter view of failed jobs, and failure notifications.

Failed jobs stay in the jobs table (one source of truth); `jobcore dlq …`
lists, groups, retries, exports and purges them. Each job that ends `failed`
can trigger a shell command (the job as JSON on stdin) and/or an HTTP POST of
the job as JSON; a failing notifier is logged and never affects the queue.
"""

from __future__ import annotations

import json
import logging
import subprocess
import urllib.error
import urllib.request
from typing import Any

import click
from pydantic import BaseModel, ConfigDict

from jobcore import Config, Job, hookimpl
from jobcore.config import PositiveSeconds

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
        if settings.notify_command:
            self._run_command(settings, job, body)
        if settings.notify_url:
            self._post(settings, job, body)

    @staticmethod
    def _run_command(settings: DlqSettings, job: Job, body: bytes) -> None:
        try:
            done = subprocess.run(
                settings.notify_command or "",
                shell=True,
                input=body,
                capture_output=True,
                timeout=settings.notify_timeout,
            )
        except subprocess.TimeoutExpired:
            log.error(
                "dlq notify_command timed out after %gs for job %s", settings.notify_timeout, job.id
            )
            return
        if done.returncode != 0:
            log.error(
                "dlq notify_command exited %d for job %s: %s",
                done.returncode,
                job.id,
                done.stderr.decode(errors="replace").strip()[-500:],
            )

    @staticmethod
    def _post(settings: DlqSettings, job: Job, body: bytes) -> None:
        request = urllib.request.Request(
            settings.notify_url or "",
            data=body,
            method="POST",
            headers={"content-type": "application/json", "user-agent": "jobcore-dlq"},
        )
        try:
            with urllib.request.urlopen(request, timeout=settings.notify_timeout) as response:
                response.read()
        except urllib.error.HTTPError as exc:
            log.error("dlq notify_url answered %d for job %s", exc.code, job.id)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            log.error("dlq notify_url failed for job %s: %s", job.id, exc)


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
