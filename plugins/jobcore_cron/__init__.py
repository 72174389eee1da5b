"""jobcore plugin `cron`: recurring jobs, enqueued once per scheduled time by any worker or hub.

Schedules come from `[plugins.cron.schedules.NAME]` tables (or
`JOBCORE_CRON_SCHEDULES`, a JSON object of such tables) and from
`jobcore_cron.schedule(...)` in a plugin module. Each `jobcore run` worker and
`jobcore serve` hub runs a scheduler thread (`jobcore_cron.scheduler`); they
share the store's record of each schedule (`jobcore_cron.store`), so however
many run, each scheduled time is enqueued once, and none needs to stay up.
`jobcore schedules` lists them with their next and last runs.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import click
from pydantic import BaseModel, ConfigDict

from jobcore import Config, ConfigError, Queue, hookimpl
from jobcore.plugins import require
from jobcore.storage.base import StatsSection

require("croniter", extra="cron")

from jobcore_cron.spec import Schedule, parse_schedule, parse_schedules  # noqa: E402

log = logging.getLogger("jobcore.cron")
H = TypeVar("H", bound=Callable[..., Any])


class CronSettings(BaseModel):
    """`[plugins.cron]` / `JOBCORE_CRON_*`."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True  # run a scheduler in this process's workers and hub
    # tables of schedules; from JOBCORE_CRON_SCHEDULES a JSON object (checked by parse_schedules)
    schedules: dict[str, Any] | str = {}


DECLARED: dict[str, Schedule] = {}  # by `schedule(...)`, in the modules imported so far
_declared_lock = threading.Lock()


def schedule(name: str, *, type: str | None = None, **fields: Any) -> Callable[[H], H]:
    """Declare a recurring job in Python; the same fields as a `[plugins.cron.schedules.NAME]`
    table (`cron`, `timezone`, `every`, `payload`, `queue`, `priority`, `policy`, `grace`,
    `catchup_window`).

    Above a `@job_type` handler it schedules that type; with `type=` it can also be called
    on its own. A bad field raises `ConfigError` at once.
    """
    if type is not None:
        _declare(parse_schedule(name, {"type": type, **fields}, "Python"))

    def declare(handler: H) -> H:
        if type is None:
            declared = getattr(sys.modules.get(handler.__module__), "__jobcore_job_types__", [])
            names = [job.name for job in declared if job.handler is handler]
            if not names:
                raise ConfigError(
                    f"schedule {name!r} (Python): put @schedule above @job_type, or give type="
                )
            _declare(parse_schedule(name, {"type": names[0], **fields}, "Python"))
        return handler

    return declare


def _declare(item: Schedule) -> None:
    with _declared_lock:
        if item.name in DECLARED:
            raise ConfigError(f"schedule {item.name!r} is declared twice in Python")
        DECLARED[item.name] = item


def schedules_of(config: Config) -> list[Schedule]:
    """Every schedule: the configuration's, then Python's; `ConfigError` for a bad one."""
    settings = config.plugin_settings("cron", CronSettings)
    source = "JOBCORE_CRON_SCHEDULES" if isinstance(settings.schedules, str) else config.file_name
    found = parse_schedules(settings.schedules, source or "configuration")
    names = {item.name for item in found}
    with _declared_lock:
        python = list(DECLARED.values())
    for item in python:
        if item.name in names:
            raise ConfigError(
                f"schedule {item.name!r} is declared both in {source or 'the configuration'} "
                "and in Python; rename one"
            )
    return [*found, *python]


class _Running:
    """Schedulers of this process, one per started worker (or hub)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_owner: dict[str, Any] = {}


_running = _Running()


@hookimpl
def jobcore_configure(config: Config) -> None:
    schedules_of(config)  # a bad schedule stops every command with one `Error:` line


@hookimpl
def jobcore_register_commands(cli: click.Group) -> None:
    from jobcore_cron.commands import schedules

    cli.add_command(schedules)


@hookimpl
def jobcore_stats(queue: Queue) -> StatsSection:
    """`schedules` in `jobcore stats`: each schedule's next and last run and its health."""
    from jobcore_cron.health import section

    return section(queue, schedules_of(queue.config))


def schedule_gauges(queue: Queue) -> list[dict[str, Any]]:
    """`{name, overdue, lag_seconds, runs}` per schedule (the otel plugin's gauges)."""
    from jobcore_cron.health import gauges

    return gauges(queue, schedules_of(queue.config))


@hookimpl
def jobcore_worker_started(worker: str, queue: Queue) -> None:
    start_scheduler(worker, queue)


@hookimpl
def jobcore_worker_stopped(worker: str) -> None:
    stop_scheduler(worker)


def start_scheduler(owner: str, queue: Queue) -> bool:
    """Start a scheduler for `owner` on `queue` unless disabled or nothing is scheduled.

    Schedules this process cannot enqueue are left out: a job type it lacks with a warning
    (a worker or hub that has the type enqueues them), a payload the type rejects with an
    error (no process can).
    """
    from jobcore_cron.scheduler import Scheduler, problems_of

    if not queue.config.plugin_settings("cron", CronSettings).enabled:
        return False
    found = schedules_of(queue.config)
    problems = problems_of(queue, found)
    for problem, elsewhere in problems.values():
        if elsewhere:
            log.warning(
                "%s; it is not registered in this process, so a worker or hub that has it "
                "enqueues this schedule's runs (none will if no process has it)",
                problem,
            )
        else:
            log.error("%s; this schedule will not run", problem)
    bad = set(problems)
    usable = [item for item in found if item.name not in bad]
    if not usable:
        return False
    scheduler = Scheduler(queue, usable, owner=owner)
    with _running.lock:
        if owner in _running.by_owner:
            return False
        _running.by_owner[owner] = scheduler
    scheduler.start()
    log.info(
        "schedules running in %s: %s",
        owner,
        ", ".join(f"{item.name} ({item.when})" for item in usable),
    )
    return True


def stop_scheduler(owner: str) -> None:
    with _running.lock:
        scheduler = _running.by_owner.pop(owner, None)
    if scheduler is not None:
        scheduler.stop()


__all__ = ["DECLARED", "CronSettings", "Schedule", "schedule", "schedule_gauges", "schedules_of"]
