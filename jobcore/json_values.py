"""JSON that every backend accepts: no NaN or Infinity anywhere.

Python's `json` writes `NaN` and `Infinity`, which are not JSON: PostgreSQL's
JSON types refuse them at write time, SQLite's JSON functions call them
malformed, and other languages' parsers reject them. Payloads and meta are
checked here when a job is built, so no backend ever sees them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from jobcore.errors import InvalidPayload
from jobcore.models import strict_json


def _without_cycle_check(default: Callable[[Any], Any]) -> Callable[[Any], str] | None:
    """A compact JSON encoder refusing NaN and Infinity, made once (not once per call, as
    `JSONEncoder.encode` does), that does not look for circular references: a cycle ends in
    `RecursionError` instead of `ValueError`. None without CPython's _json accelerator."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - CPython without its _json accelerator
        return None
    # markers (None: no cycle check), default, string encoder, indent, key and item
    # separators, sort_keys, skipkeys, allow_nan
    encoder = make(
        None, default, json.encoder.encode_basestring_ascii, None, ":", ",", *[False] * 3
    )

    def encode(value: Any) -> str:
        return "".join(encoder(value, 0))

    return encode


_probe = (
    _without_cycle_check(lambda value: None)
    or json.JSONEncoder(allow_nan=False, default=lambda value: None).encode
)
"""Encodes anything, objects JSON has no form for as null; raises ValueError on NaN."""

_encode_acyclic = _without_cycle_check(json.JSONEncoder().default) or strict_json
"""`strict_json` for values without circular references (a model's JSON dump)."""


def non_finite_path(value: Any, path: str = "") -> str | None:
    """Where the first NaN or ±Infinity in dicts, lists and tuples sits (`a.b[2]`); None if none."""
    if isinstance(value, float):
        return None if math.isfinite(value) else path or "(the value itself)"
    if isinstance(value, dict):
        for key, item in value.items():
            found = non_finite_path(item, f"{path}.{key}" if path else str(key))
            if found is not None:
                return found
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = non_finite_path(item, f"{path}[{index}]")
            if found is not None:
                return found
    return None


def _refuse(what: str, value: Any) -> InvalidPayload:
    where = non_finite_path(value)
    at = f" at {where}" if where is not None else ""
    return InvalidPayload(
        f"{what} has a non-finite number (NaN or Infinity){at}; JSON has no such values "
        "and stores refuse them: send a finite number, null or a string instead"
    )


def check_finite(what: str, value: Any) -> None:
    """Raise `InvalidPayload` naming `what` if `value` holds NaN or ±Infinity.

    Objects JSON cannot encode are skipped (a payload model may still turn them
    into JSON values); only non-finite floats are looked for.
    """
    try:
        _probe(value)
    except ValueError as exc:
        if "JSON compliant" in str(exc):
            raise _refuse(what, value) from None
    except (TypeError, RecursionError):
        return  # not JSON yet, or too deep for this probe: the final encoding judges it


def probe_finite(value: Any) -> bool:
    """True if `value` encodes as JSON with finite numbers only (as `check_finite` would
    find nothing to say, for every part of it); False when it may not."""
    try:
        _probe(value)
    except (ValueError, TypeError, RecursionError):
        return False
    return True


def check_meta(what: str, meta: dict[str, Any]) -> None:
    """Raise `InvalidPayload` naming `what` unless `meta` encodes as JSON (finite numbers only)."""
    try:
        strict_json(meta)
    except ValueError as exc:
        if "JSON compliant" in str(exc):
            raise _refuse(what, meta) from None
        raise InvalidPayload(f"{what} must be a JSON object: {exc}") from None
    except (TypeError, RecursionError) as exc:
        raise InvalidPayload(f"{what} must be a JSON object: {exc}") from None


def encode_finite(what: str, value: Any, *, acyclic: bool = False) -> str:
    """`strict_json(value)`, or `InvalidPayload` naming `what` if it holds NaN or ±Infinity.

    `acyclic`: the caller knows `value` holds no circular reference (e.g. a model's
    JSON dump), so the encoding skips looking for one.
    """
    try:
        return _encode_acyclic(value) if acyclic else strict_json(value)
    except ValueError as exc:
        if "JSON compliant" not in str(exc):
            raise
        raise _refuse(what, value) from None
