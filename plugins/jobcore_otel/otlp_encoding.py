"""OTLP/protobuf bytes of an `ExportTraceServiceRequest`, written directly from finished spans.

The SDK's encoder builds a protobuf message object per span, attribute and
value and hashes each span's resource (a JSON dump) to group them; for a
worker exporting every job's span that was the largest part of tracing's cost.
This writes the same wire bytes (the tests compare them with the SDK's, byte
for byte) from any span exposing `ReadableSpan`'s fields, and caches the parts
that repeat from span to span: names, scopes, resources, and attribute pairs
such as `messaging.destination.name=default`.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.trace import SpanKind, Status, StatusCode

log = logging.getLogger("jobcore.otel")
# the kind field (6) for each SDK SpanKind (its value + 1 is OTLP's Span.SpanKind)
_SPAN_KIND = {kind: bytes((0x30, kind.value + 1)) for kind in SpanKind}
UNSET_STATUS = Status(StatusCode.UNSET)  # shared by `JobSpan`s: encoded without a look
_UNSET_STATUS_FIELD = b"\x7a\x00"
_HAS_IS_REMOTE = 0x100
_IS_REMOTE = 0x200
_UNKNOWN = object()
_CACHE_LIMIT = 4096  # encoded attribute pairs (and keys, names) kept; cleared when full
_NEW_VALUES = 64  # a key whose values missed the cache this often is an id's: not cached
_pack_double = struct.Struct("<d").pack
_pack_fixed64 = struct.Struct("<Q").pack
_pack_fixed32 = struct.Struct("<I").pack
_pack_times = struct.Struct("<BQBQ").pack  # start (field 7) and end (field 8), both fixed64
# Span.flags (field 16): under no parent or a local one; under a remote parent
_PARENT_FLAGS = b"\x85\x01" + _pack_fixed32(_HAS_IS_REMOTE)
_PARENT_FLAGS_REMOTE = b"\x85\x01" + _pack_fixed32(_HAS_IS_REMOTE | _IS_REMOTE)


def _varint(value: int) -> bytes:
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(tag: int, payload: bytes) -> bytes:
    """A length-delimited field: its tag byte (field < 16, wire type 2), length, payload."""
    return bytes((tag,)) + _varint(len(payload)) + payload


def _any_value(value: Any) -> bytes:
    """An `AnyValue` message's bytes (the same choices as the SDK's `_encode_value`)."""
    if value is None:
        return b""
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, str):
        return _field(0x0A, value.encode())
    if isinstance(value, int):
        if not -(2**63) <= value < 2**63:
            raise ValueError(f"Value out of range: {value}")
        return b"\x18" + _varint(value & 0xFFFFFFFFFFFFFFFF)
    if isinstance(value, float):
        return b"\x21" + _pack_double(value)
    if isinstance(value, bytes):
        return _field(0x3A, value)
    if isinstance(value, Sequence):
        return _field(0x2A, b"".join(_field(0x0A, _any_value(item)) for item in value))
    if isinstance(value, Mapping):
        return _field(0x32, b"".join(_field(0x0A, _key_value(str(k), v)) for k, v in value.items()))
    raise TypeError(f"Invalid type {type(value)} of value {value}")


def _key_value(key: str, value: Any) -> bytes:
    return _field(0x0A, key.encode()) + _field(0x12, _any_value(value))


class SpanEncoder:
    """Encodes batches of finished spans; one per exporter (its caches are not shared)."""

    def __init__(self) -> None:
        self._pairs: dict[tuple[int, str, type, Any], bytes] = {}  # by field tag too
        self._names: dict[str, bytes] = {}
        self._keys: dict[str, bytes] = {}
        self._misses: dict[str, int] = {}
        self._resources: dict[int, tuple[Any, bytes]] = {}
        self._scopes: dict[Any, bytes] = {}
        self._unread: dict[type, Any] = {}  # each span type's `unread_ids`, or None

    def _attributes(self, tag: int, attributes: Mapping[str, Any] | None) -> bytes:
        """Each pair as a repeated `KeyValue` field `tag`.

        Pairs of a string, integer or boolean come from a cache, except under keys
        whose values keep changing (after `_NEW_VALUES` misses: ids), whose
        encoded key alone is kept.
        """
        if not attributes:
            return b""
        pairs = self._pairs
        parts = []
        for key, value in attributes.items():
            kind = type(value)
            if kind is str or kind is int or kind is bool:  # not floats: 0.0 == -0.0
                encoded = pairs.get((tag, key, kind, value))
                if encoded is not None:
                    parts.append(encoded)
                    continue
                if kind is str:
                    try:
                        prefix = self._keys.get(key)
                        if prefix is None:
                            prefix = _field(0x0A, key.encode())
                            if len(self._keys) >= _CACHE_LIMIT:
                                self._keys.clear()
                                self._misses.clear()
                            self._keys[key] = prefix
                        raw = value.encode()
                        if len(raw) < 126:  # AnyValue{string_value} in one short field
                            value_field = b"\x12" + bytes((len(raw) + 2, 0x0A, len(raw))) + raw
                        else:
                            value_field = _field(0x12, _field(0x0A, raw))
                    except Exception as error:  # e.g. a lone surrogate: left out, as the SDK does
                        log.exception("Failed to encode key %s: %s", key, error)
                        continue
                    encoded = (
                        bytes((tag,))
                        + _varint(len(prefix) + len(value_field))
                        + prefix
                        + value_field
                    )
                    parts.append(encoded)
                    misses = self._misses.get(key, 0)
                    if misses < _NEW_VALUES:
                        self._misses[key] = misses + 1
                        self._keep(pairs, (tag, key, kind, value), encoded)
                    continue
            try:
                encoded = _field(tag, _key_value(key, value))
            except Exception as error:  # as the SDK's encoder: the pair is left out, logged
                log.exception("Failed to encode key %s: %s", key, error)
                continue
            if kind is int or kind is bool:
                self._keep(pairs, (tag, key, kind, value), encoded)
            parts.append(encoded)
        return b"".join(parts)

    @staticmethod
    def _keep(
        pairs: dict[tuple[int, str, type, Any], bytes],
        pair: tuple[int, str, type, Any],
        encoded: bytes,
    ) -> None:
        if len(pairs) >= _CACHE_LIMIT:
            pairs.clear()
        pairs[pair] = encoded

    def _name(self, name: str) -> bytes:
        encoded = self._names.get(name)
        if encoded is None:
            if len(self._names) >= _CACHE_LIMIT:
                self._names.clear()
            encoded = self._names[name] = _field(0x2A, name.encode())
        return encoded

    def _resource(self, resource: Any) -> bytes:
        """`ResourceSpans.resource` (field 1), by identity: providers keep one resource object."""
        cached = self._resources.get(id(resource))
        if cached is None or cached[0] is not resource:
            encoded = b""
            if resource is not None:
                encoded = _field(0x0A, self._attributes(0x0A, resource.attributes))
            if len(self._resources) >= 64:
                self._resources.clear()
            cached = self._resources[id(resource)] = (resource, encoded)
        return cached[1]

    def _scope(self, scope: Any) -> bytes:
        """`ScopeSpans.scope` (field 1) and the scope's schema URL (field 3)."""
        encoded = self._scopes.get(scope)
        if encoded is None:
            if scope is None:
                encoded = _field(0x0A, b"")
            else:
                body = b""
                if scope.name:
                    body += _field(0x0A, scope.name.encode())
                if scope.version:
                    body += _field(0x12, scope.version.encode())
                body += self._attributes(0x1A, scope.attributes)
                encoded = _field(0x0A, body)
            if len(self._scopes) >= 64:
                self._scopes.clear()
            self._scopes[scope] = encoded
        return encoded

    def span(self, span: Any) -> bytes:
        """One `Span` message's bytes."""
        kind = type(span)
        unread = self._unread.get(kind, _UNKNOWN)
        if unread is _UNKNOWN:  # a span type whose ids can be read as bytes (`JobSpan`)?
            unread = self._unread[kind] = getattr(kind, "unread_ids", None)
        ids = None if unread is None else unread(span)
        if ids is None:
            context = span.get_span_context()
            parent = span.parent
            out = [
                b"\x0a\x10",
                context.trace_id.to_bytes(16, "big"),
                b"\x12\x08",
                context.span_id.to_bytes(8, "big"),
            ]
            trace_state = context.trace_state
            if trace_state:
                out.append(
                    _field(0x1A, ",".join(f"{k}={v}" for k, v in trace_state.items()).encode())
                )
            if parent is not None:
                out += (b"\x22\x08", parent.span_id.to_bytes(8, "big"))
            remote = parent is not None and parent.is_remote
        else:  # a remote parent read from a lone traceparent has an empty trace state
            trace_id, span_id, parent_id = ids
            out = [b"\x0a\x10", trace_id, b"\x12\x08", span_id]
            if parent_id is not None:
                out += (b"\x22\x08", parent_id)
            remote = parent_id is not None
        out += (self._name(span.name), _SPAN_KIND[span.kind])
        start, end = span.start_time, span.end_time
        if start and end:
            out.append(_pack_times(0x39, start, 0x41, end))
        elif start:
            out += (b"\x39", _pack_fixed64(start))
        elif end:
            out += (b"\x41", _pack_fixed64(end))
        out.append(self._attributes(0x4A, span.attributes))
        dropped = span.dropped_attributes
        if dropped:
            out += (b"\x50", _varint(dropped))
        events = span.events
        if events:
            out += (self._event(event) for event in events)
        dropped = span.dropped_events
        if dropped:
            out += (b"\x60", _varint(dropped))
        links = span.links
        if links:
            out += (self._link(link) for link in links)
        dropped = span.dropped_links
        if dropped:
            out += (b"\x70", _varint(dropped))
        status = span.status
        if status is UNSET_STATUS:
            out.append(_UNSET_STATUS_FIELD)
        elif status is not None:
            body = b""
            if status.description:
                body += _field(0x12, status.description.encode())
            if status.status_code.value:
                body += b"\x18" + _varint(status.status_code.value)
            out.append(_field(0x7A, body))
        out.append(_PARENT_FLAGS_REMOTE if remote else _PARENT_FLAGS)
        return b"".join(out)

    def _event(self, event: Any) -> bytes:
        body = b""
        if event.timestamp:
            body += b"\x09" + _pack_fixed64(event.timestamp)
        if event.name:
            body += _field(0x12, event.name.encode())
        body += self._attributes(0x1A, event.attributes)
        if event.dropped_attributes:
            body += b"\x20" + _varint(event.dropped_attributes)
        return _field(0x5A, body)

    def _link(self, link: Any) -> bytes:
        body = (
            b"\x0a\x10"
            + link.context.trace_id.to_bytes(16, "big")
            + b"\x12\x08"
            + link.context.span_id.to_bytes(8, "big")
            + self._attributes(0x22, link.attributes)
        )
        if link.dropped_attributes:
            body += b"\x28" + _varint(link.dropped_attributes)
        body += b"\x35" + _pack_fixed32(_flags(link.context))
        return _field(0x6A, body)

    def request(self, spans: Sequence[Any]) -> bytes:
        """The `ExportTraceServiceRequest` bytes for `spans`, grouped by resource, then scope."""
        grouped: dict[int, tuple[Any, dict[Any, list[bytes]]]] = {}
        for span in spans:
            resource = span.resource
            scopes = grouped.get(id(resource))
            if scopes is None:
                scopes = grouped[id(resource)] = (resource, {})
            scope = span.instrumentation_scope or None
            encoded = scopes[1].get(scope)
            if encoded is None:
                encoded = scopes[1][scope] = []
            encoded.append(_field(0x12, self.span(span)))
        out = []
        for resource, by_scope in grouped.values():
            body = [self._resource(resource)]
            for scope, encoded in by_scope.items():
                scope_body = self._scope(scope) + b"".join(encoded)
                if scope is not None and scope.schema_url:
                    scope_body += _field(0x1A, scope.schema_url.encode())
                body.append(_field(0x12, scope_body))
            if resource is not None and resource.schema_url:
                body.append(_field(0x1A, resource.schema_url.encode()))
            out.append(_field(0x0A, b"".join(body)))
        return b"".join(out)


def _flags(parent: Any) -> int:
    return (
        _HAS_IS_REMOTE | _IS_REMOTE if parent is not None and parent.is_remote else _HAS_IS_REMOTE
    )
