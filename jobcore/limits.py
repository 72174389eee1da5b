"""Bounds on enqueue options, defined once for `Queue.build` and the CLI."""

from __future__ import annotations

import math
from typing import Any

from jobcore.errors import ConfigError, InvalidPayload

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1  # priority and max_attempts: what every backend stores as an integer
LONGEST_SECONDS = 100 * 365 * 86400.0  # delay and timeout; longer would overflow ms times
SHORTEST_TIMEOUT_SECONDS = 0.001  # the store's resolution
MAX_TIME_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
# Text a store indexes, in UTF-8 bytes: PostgreSQL refuses a btree entry over 2704 bytes
# (error class 54), and (type, idempotency_key) share one entry; both stores take the same.
MAX_NAME_BYTES = 1000  # type, queue, parent_id
MAX_KEY_BYTES = 1600  # idempotency_key


def check_enqueue_options(
    *,
    queue: Any,
    priority: Any,
    delay: Any,
    run_at: Any,
    max_attempts: Any,
    timeout: Any,
    idempotency_key: Any,
    parent_id: Any,
) -> None:
    """Raise `InvalidPayload` naming the first enqueue option out of its range (None = unset)."""
    if queue is not None and (not isinstance(queue, str) or not queue.strip()):
        raise InvalidPayload(f"queue must be a non-empty string, not {queue!r}")
    check_text("queue", queue)
    check_bytes("queue", queue, MAX_NAME_BYTES)
    _check_int("priority", priority, INT32_MIN, INT32_MAX)
    _check_int("max_attempts", max_attempts, 1, INT32_MAX)
    _check_int("run_at", run_at, 0, MAX_TIME_MS, "a time in ms since 1970 up to year 9999")
    _check_seconds("delay", delay, 0.0)
    _check_seconds("timeout", timeout, SHORTEST_TIMEOUT_SECONDS)
    for name, value in (("idempotency_key", idempotency_key), ("parent_id", parent_id)):
        if value is not None and not isinstance(value, str):
            raise InvalidPayload(f"{name} must be a string, not {type(value).__name__}")
        check_text(name, value)
        check_bytes(name, value, MAX_KEY_BYTES if name == "idempotency_key" else MAX_NAME_BYTES)
    if delay is not None and run_at is not None:
        raise InvalidPayload("give either delay or run_at, not both")


def check_text(name: str, value: str | None) -> None:
    """Raise `InvalidPayload` if the text field `name` holds a NUL character (PostgreSQL text
    cannot, so no store takes one) or a lone surrogate (not encodable as UTF-8)."""
    if value is None:
        return
    if "\x00" in value:
        raise InvalidPayload(f"{name} must not contain a NUL character (\\u0000)")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidPayload(
                f"{name} holds a lone surrogate (\\uD800-\\uDFFF); use valid Unicode text"
            ) from None


def check_bytes(name: str, value: str | None, limit: int) -> None:
    """Raise `InvalidPayload` if the text field `name` is over `limit` bytes as UTF-8."""
    if value is None or len(value) * 4 <= limit:  # at most 4 bytes a character
        return
    size = len(value) if value.isascii() else len(value.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise InvalidPayload(
            f"{name} is {size} bytes as UTF-8, over the {limit}-byte limit; shorten it"
        )


def _check_int(name: str, value: Any, low: int, high: int, what: str = "") -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidPayload(f"{name} must be an integer, not {type(value).__name__}")
    if not low <= value <= high:
        range_text = what or f"an integer from {low} to {high}"
        raise InvalidPayload(f"{name} must be {range_text}, not {value}")


def _check_seconds(name: str, value: Any, low: float) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidPayload(f"{name} must be a number of seconds, not {type(value).__name__}")
    if not (math.isfinite(value) and low <= value <= LONGEST_SECONDS):
        raise InvalidPayload(
            f"{name} must be between {low:g} and {LONGEST_SECONDS:g} seconds, not {value}"
        )


def check_duration(seconds: float, *, positive: bool = False) -> float:
    """`seconds` within the bounds every duration has, whatever its source (the CLI's:
    at least 1ms when it must be positive, at most 100 years, never infinite); else
    ValueError saying which bounds."""
    low = SHORTEST_TIMEOUT_SECONDS if positive else 0.0
    if not (math.isfinite(seconds) and low <= seconds <= LONGEST_SECONDS):
        least = "1ms" if positive else "0"
        raise ValueError(
            f"{seconds:g} seconds is out of range; give a duration from {least} to 100 years"
        )
    return seconds


def check_arguments(*, positive: bool = True, **durations: Any) -> None:
    """Raise `ConfigError` naming the first duration argument out of `check_duration`'s bounds."""
    for name, value in durations.items():
        try:
            if value is not None:
                check_duration(float(value), positive=positive)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"bad argument {name}={value!r}: {exc}") from None
