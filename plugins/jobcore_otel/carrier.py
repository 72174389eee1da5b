"""The W3C trace context a job carries in `meta["otel"]`, read as the propagator reads it.

The plugin writes a lone version-00 `traceparent` at enqueue; that common
carrier is read directly (no propagator call), anything else goes to the
propagator. `meta` comes from whoever enqueued the job: nothing here trusts
its shape.
"""

from __future__ import annotations

import re
from typing import Any

from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

PROPAGATOR = TraceContextTextMapPropagator()
TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
EMPTY_CONTEXT = Context()  # never changed: `set_value` copies
_ODD_HEX = frozenset("13579bdf")
_NO_TRACE_ID, _NO_SPAN_ID = bytes(16), bytes(8)


def extract(carrier: dict[str, str]) -> Context:
    """`PROPAGATOR.extract(carrier)`, read directly for the common carrier (a lone version-00
    `traceparent`, what this plugin writes); anything else goes to the propagator."""
    match = TRACEPARENT.fullmatch(carrier.get("traceparent", "")) if len(carrier) == 1 else None
    if match is not None:
        remote = _span_context(match)
        if remote is not None:
            return remote_context(remote)
    return PROPAGATOR.extract(carrier)


def lone_traceparent(meta: Any) -> str | None:
    """`meta["otel"]["traceparent"]` when it is a string and the carrier's only field."""
    carrier = meta.get("otel") if type(meta) is dict else None
    if type(carrier) is not dict or len(carrier) != 1:
        return None
    traceparent = carrier.get("traceparent")
    return traceparent if type(traceparent) is str else None


def remote_parent(traceparent: str) -> SpanContext | None:
    """The remote parent `extract` reads from a lone `traceparent` when it matches the
    version-00 form with non-zero ids; None for anything else (judged by `extract`)."""
    match = TRACEPARENT.fullmatch(traceparent)
    return None if match is None else _span_context(match)


def remote_parent_ids(traceparent: str) -> tuple[bytes, bytes] | None:
    """The trace id and span id of the parent `remote_parent` reads, as wire bytes (16 and
    8, big-endian); None when it reads none."""
    match = TRACEPARENT.fullmatch(traceparent)
    if match is None:
        return None
    trace_id, span_id = bytes.fromhex(match[1]), bytes.fromhex(match[2])
    if trace_id == _NO_TRACE_ID or span_id == _NO_SPAN_ID:
        return None
    return trace_id, span_id


def sampled_either_way(traceparent: str) -> bool:
    """Whether `extract` of a lone `traceparent` surely gives a sampled parent or none at all.

    A version-00 value of the exact length whose flags end in an odd hex digit is either
    valid and sampled, or unreadable (then the span is a root); its flags are its last two
    characters. Whether it is valid can then wait until the span's context is needed.
    """
    return len(traceparent) == 55 and traceparent[-1] in _ODD_HEX and traceparent[:3] == "00-"


def remote_context(remote: SpanContext | None) -> Context:
    """The context a propagator returns for `remote` (an empty one for None)."""
    if remote is None:
        return EMPTY_CONTEXT
    return set_span_in_context(NonRecordingSpan(remote), EMPTY_CONTEXT)


def _span_context(match: re.Match[str]) -> SpanContext | None:
    trace_id, span_id = int(match[1], 16), int(match[2], 16)
    if not (trace_id and span_id):
        return None
    return SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(int(match[3], 16)))
