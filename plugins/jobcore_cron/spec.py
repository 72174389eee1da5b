"""A schedule: what to enqueue, when, and what to do about runs missed while nothing ran.

Declared in `[plugins.cron.schedules.NAME]` tables (or `JOBCORE_CRON_SCHEDULES`, a
JSON object of them) or in Python with `jobcore_cron.schedule(...)`. Every
field is checked here, so a bad schedule is one `ConfigError` naming it and the
field before anything runs.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Literal, cast
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter

from jobcore import ConfigError
from jobcore.timeutil import parse_duration
from jobcore_cron.timing import ALIASES, Cron, Every, Timing

Policy = Literal["skip", "latest", "all"]
POLICIES: tuple[Policy, ...] = ("skip", "latest", "all")
FIELDS = {
    "type",
    "payload",
    "queue",
    "priority",
    "cron",
    "timezone",
    "every",
    "policy",
    "grace",
    "catchup_window",
}
SHORTEST_EVERY = 1.0  # seconds
LONGEST = 366 * 86400.0  # seconds: `every`, `grace` and `catchup_window` at most a year
MAX_NAME = 200
DEFAULT_GRACE = 60.0
DEFAULT_CATCHUP_WINDOW = 3600.0


@dataclass(frozen=True)
class Schedule:
    """One recurring job. Times in ms; `grace_ms`: a run seen later than this after its
    scheduled time was missed; `catchup_ms`: how far back `latest` and `all` reach."""

    name: str
    type: str
    timing: Timing = field(compare=False)
    when: str  # as declared: the cron expression with its zone, or `every 5m`
    payload: dict[str, Any] = field(default_factory=dict)
    queue: str | None = None
    priority: int | None = None
    policy: Policy = "skip"
    grace_ms: int = int(DEFAULT_GRACE * 1000)
    catchup_ms: int = int(DEFAULT_CATCHUP_WINDOW * 1000)
    source: str = "Python"


def parse_schedule(name: Any, table: Any, source: str) -> Schedule:
    """Check one schedule's fields; `ConfigError` naming `source`, the schedule and the field."""
    where = f"schedule {name!r} ({source})"
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME:
        raise ConfigError(f"{where}: a schedule needs a name of 1 to {MAX_NAME} characters")
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: must be a table of settings, not {type(table).__name__}")
    unknown = sorted(set(table) - FIELDS)
    if unknown:
        raise ConfigError(
            f"{where}: unknown setting {unknown[0]!r}; a schedule takes {', '.join(sorted(FIELDS))}"
        )

    def bad(setting: str, problem: str) -> ConfigError:
        return ConfigError(f"{where}: bad {setting} {table.get(setting)!r}: {problem}")

    type_name = table.get("type")
    if not isinstance(type_name, str) or not type_name:
        raise bad("type", 'name the job type to enqueue, e.g. type = "noop"')
    payload = table.get("payload", {})
    if not isinstance(payload, dict):
        raise bad("payload", "must be a table (a JSON object)")
    queue = table.get("queue")
    if queue is not None and (not isinstance(queue, str) or not queue):
        raise bad("queue", "must be a queue name")
    priority = table.get("priority")
    if priority is not None and (
        isinstance(priority, bool) or not isinstance(priority, int) or abs(priority) > 2**31
    ):
        raise bad("priority", "must be a whole number")
    policy = table.get("policy", "skip")
    if policy not in POLICIES:
        raise bad("policy", f"use one of {', '.join(POLICIES)}")
    grace = _seconds(table, "grace", DEFAULT_GRACE, bad)
    catchup = _seconds(table, "catchup_window", DEFAULT_CATCHUP_WINDOW, bad)
    timing, when = _timing(table, bad, where)
    return Schedule(
        name=name,
        type=type_name,
        timing=timing,
        when=when,
        payload=payload,
        queue=queue,
        priority=priority,
        policy=cast(Policy, policy),
        grace_ms=int(grace * 1000),
        catchup_ms=int(catchup * 1000),
        source=source,
    )


def _seconds(table: dict[str, Any], setting: str, default: float, bad: Any) -> float:
    value = table.get(setting, default)
    try:
        seconds = parse_duration(value)
    except (TypeError, ValueError) as exc:
        raise bad(setting, str(exc)) from None
    if not (math.isfinite(seconds) and SHORTEST_EVERY <= seconds <= LONGEST):
        raise bad(setting, "give a duration from 1s to 366d")
    return seconds


def _timing(table: dict[str, Any], bad: Any, where: str) -> tuple[Timing, str]:
    expression, every = table.get("cron"), table.get("every")
    if (expression is None) == (every is None):
        raise ConfigError(f'{where}: give exactly one of cron = "*/5 * * * *" or every = "5m"')
    if every is not None:
        if "timezone" in table:
            raise bad("timezone", "applies to cron schedules only; every runs on UTC multiples")
        try:
            seconds = parse_duration(every)
        except (TypeError, ValueError) as exc:
            raise bad("every", str(exc)) from None
        if not (math.isfinite(seconds) and SHORTEST_EVERY <= seconds <= LONGEST):
            raise bad("every", "give a duration from 1s to 366d")
        if seconds != int(seconds):
            raise bad("every", "give whole seconds")
        every_timing = Every(int(seconds) * 1000)
        return every_timing, every_timing.describe()
    if not isinstance(expression, str):
        raise bad("cron", 'must be a string such as "*/5 * * * *"')
    fields = ALIASES.get(expression.strip().lower(), expression).split()
    if len(fields) != 5 or not croniter.is_valid(" ".join(fields)):
        raise bad(
            "cron",
            "not a cron expression; give five fields (minute hour day month weekday), "
            'e.g. "*/5 * * * *", or @hourly/@daily/@weekly/@monthly/@yearly',
        )
    zone_name = table.get("timezone", "UTC")
    if not isinstance(zone_name, str) or not zone_name:
        raise bad("timezone", 'must be an IANA time zone name such as "Europe/Paris"')
    try:
        zone = ZoneInfo(zone_name)
    except (ZoneInfoNotFoundError, ValueError):
        raise bad(
            "timezone", 'unknown time zone; use an IANA name such as "Europe/Paris"'
        ) from None
    timing = Cron(expression, zone)
    try:  # croniter accepts dates no month has (`0 0 30 2 *`): it fails only when asked
        next(timing.times_after(0))
    except CroniterError:
        raise bad("cron", "never fires (no such date); check the day and month fields") from None
    return timing, timing.describe()


def parse_schedules(tables: Any, source: str) -> list[Schedule]:
    """The schedules of a `[plugins.cron.schedules]` table (or its JSON text, from the env)."""
    if isinstance(tables, str):
        try:
            tables = json.loads(tables)
        except ValueError as exc:
            raise ConfigError(f"schedules from {source}: not a JSON object ({exc})") from None
    if not isinstance(tables, dict):
        raise ConfigError(
            f"schedules from {source}: must be a table of schedules ([plugins.cron.schedules.NAME])"
        )
    from_env = source.startswith("JOBCORE_")
    return [
        parse_schedule(
            name, table, source if from_env else f"{source} [plugins.cron.schedules.{name}]"
        )
        for name, table in tables.items()
    ]
