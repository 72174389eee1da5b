"""Click parameter types for durations, times and names (bad values are usage errors, exit 2)."""

from __future__ import annotations

from typing import Any

import click

from jobcore.limits import INT32_MAX, INT32_MIN, LONGEST_SECONDS
from jobcore.timeutil import parse_duration, parse_time

LONGEST = LONGEST_SECONDS


class DurationType(click.ParamType):  # type: ignore[type-arg]
    """`500ms`, `30s`, `5m`, `2h`, `1d` or plain seconds -> float seconds.

    `positive=True` for options where zero makes no sense (a lease, a timeout):
    such a duration must be at least 1ms, the store's resolution.
    """

    name = "duration"

    def __init__(self, *, positive: bool = False) -> None:
        self.positive = positive

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, float):
            return value
        try:
            seconds = parse_duration(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        if self.positive and seconds < 0.001:
            self.fail(f"{value!r} is too short; give a duration of at least 1ms", param, ctx)
        if seconds > LONGEST:
            self.fail(f"{value!r} is too long; the longest duration is 100 years", param, ctx)
        return seconds


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


class TextType(click.ParamType):  # type: ignore[type-arg]
    """A name or an id: UTF-8 text. An argument of bytes that are not UTF-8 (the shell's
    `$'q\\xff'`) reaches Python with lone surrogates, which no store can hold or look up."""

    name = "text"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if not text.isascii():
            try:
                text.encode()
            except UnicodeEncodeError as exc:
                bad = text[exc.start : exc.end].encode("utf-8", "surrogateescape")
                self.fail(
                    f"{text!r} holds bytes that are not UTF-8 ({bad!r}); give it as UTF-8 text",
                    param,
                    ctx,
                )
        return text


class NonEmptyType(TextType):
    """Text that is not empty or blank (an unset shell variable is a mistake, not a name)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = super().convert(value, param, ctx)
        if not text.strip():
            self.fail("must not be empty", param, ctx)
        return text


DURATION = DurationType()
POSITIVE_DURATION = DurationType(positive=True)
TIME = TimeType()
TEXT = TextType()
NON_EMPTY = NonEmptyType()
INT32 = click.IntRange(INT32_MIN, INT32_MAX)  # what every backend stores as an integer
POSITIVE_INT32 = click.IntRange(1, INT32_MAX)
