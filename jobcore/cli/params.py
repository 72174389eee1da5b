"""Click parameter types for durations and times (bad values are usage errors, exit 2)."""

from __future__ import annotations

from typing import Any

import click

from jobcore.timeutil import parse_duration, parse_time


class DurationType(click.ParamType):  # type: ignore[type-arg]
    """`500ms`, `30s`, `5m`, `2h`, `1d` or plain seconds -> float seconds."""

    name = "duration"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, float):
            return value
        try:
            return parse_duration(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class TimeType(click.ParamType):  # type: ignore[type-arg]
    """ISO-8601 time, UTC when no offset is given -> ms since the epoch."""

    name = "time"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_time(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


DURATION = DurationType()
TIME = TimeType()
