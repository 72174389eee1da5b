"""A job attempt's `process` span, built without the SDK span's per-span machinery.

Used only when the plugin built the tracer provider itself with the OTLP
exporter as its one span processor: the SDK's `Span` takes a lock, validates
every attribute into `BoundedAttributes`, and copies itself into a
`ReadableSpan` when it ends; a worker exporting every job paid more for that
than for the job. `JobSpan` is a full `opentelemetry.trace.Span` (handlers may
set attributes, add events, record exceptions on the current span) that is
its own readable span: when it ends it is handed as-is to the batch processor,
whose exporter encodes it with `otlp_encoding`. The sampler, id generator,
resource and span limits are the provider's.
"""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Mapping, Sequence
from time import time_ns

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.context import Context
from opentelemetry.sdk.trace import Event, SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import DEFAULT_ON, Decision
from opentelemetry.sdk.util import BoundedList
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
    get_current_span,
)
from opentelemetry.util import types

from jobcore_otel.carrier import remote_context, remote_parent, remote_parent_ids
from jobcore_otel.otlp_encoding import UNSET_STATUS

log = logging.getLogger("jobcore.otel")
# W3C's random-trace-id flag, set by newer SDKs on roots with random ids and inherited
RANDOM = int(getattr(TraceFlags, "RANDOM_TRACE_ID", 0))
# the trace flags by (sampled, random trace id)
FLAGS = {
    (sampled, random): TraceFlags(
        (TraceFlags.SAMPLED if sampled else 0) | (RANDOM if random else 0)
    )
    for sampled in (False, True)
    for random in (False, True)
}


_SDK_ON_END = BatchSpanProcessor.on_end  # as imported: checked unpatched below


def _sdk_on_end(processor: SpanProcessor) -> bool:
    """Whether `processor`'s `on_end` is the SDK's own `BatchSpanProcessor.on_end`, patched
    neither on the class (now or before this module's import) nor on the instance."""
    return (
        type(processor).on_end is _SDK_ON_END
        and "on_end" not in vars(processor)
        and _SDK_ON_END.__module__ == BatchSpanProcessor.__module__
        and not hasattr(_SDK_ON_END, "__wrapped__")
    )


class JobSpanFactory:
    """Starts `JobSpan`s with a provider's sampler, ids, resource and limits; ends into `processor`."""

    def __init__(self, provider: TracerProvider, processor: SpanProcessor, scope: str) -> None:
        self.sampler = provider.sampler
        self.id_generator = provider.id_generator
        self.resource = provider.resource
        self.scope = InstrumentationScope(scope)  # equal to the provider's tracer's scope
        self.limits: SpanLimits = getattr(provider, "_span_limits", None) or SpanLimits()
        # With a length limit (or very few attributes allowed) the start attributes are
        # bounded as the SDK bounds them; by default a plain dict is the same.
        self.bounded = self.limits.max_span_attribute_length is not None or (
            self.limits.max_span_attributes is not None and self.limits.max_span_attributes < 32
        )
        self.processor = processor
        # BatchSpanProcessor.on_end is "if sampled: emit": such a span, sampled by then, is
        # handed to emit without reading its context on the worker's thread.
        batch = getattr(processor, "_batch_processor", None)
        own = type(processor) is BatchSpanProcessor  # its `on_end` is checked at each end
        emit = getattr(batch, "emit", None) if own else None
        self.emit_sampled = emit if callable(emit) else None
        is_random = getattr(self.id_generator, "is_trace_id_random", None)  # newer SDKs
        self.random_roots = bool(RANDOM and is_random is not None and is_random())

    def start(
        self,
        name: str,
        parent: Context | None,
        kind: SpanKind,
        attributes: dict[str, types.AttributeValue],
        remote: SpanContext | None = None,
    ) -> JobSpan | NonRecordingSpan:
        """A started span under `parent`, or, when `parent` is None, under `remote` (a remote
        parent's context; None: a root). When the sampler does not record it, the
        `NonRecordingSpan` the SDK's tracer returns (same trace, a new span id, not sampled),
        so that spans started under it (child jobs' `send` spans) get the SDK's sampling
        decisions (`attributes` is kept)."""
        if parent is not None:
            parent_span = get_current_span(parent).get_span_context()
            remote = parent_span if parent_span.is_valid else None
        if remote is None:
            trace_id = self.id_generator.generate_trace_id()
            random = self.random_roots
        else:
            trace_id = remote.trace_id
            random = bool(remote.trace_flags & RANDOM)
        if self.sampler is DEFAULT_ON:  # the default, ParentBased(ALWAYS_ON), decided directly:
            # follow a parent's sampled flag, sample a root; attributes as given
            if remote is not None and not remote.trace_flags.sampled:
                return self._not_recorded(trace_id, random, remote.trace_state)
            trace_state = remote.trace_state if remote is not None else None
            flags = FLAGS[True, random]
        else:
            if parent is None:  # the context `parent` would have been
                parent = remote_context(remote)
            result = self.sampler.should_sample(parent, trace_id, name, kind, attributes)
            if result.decision is Decision.DROP:
                return self._not_recorded(trace_id, random, result.trace_state)
            trace_state = result.trace_state
            flags = FLAGS[result.decision is Decision.RECORD_AND_SAMPLE, random]
            attributes = dict(result.attributes)
        context = SpanContext(
            trace_id,
            self.id_generator.generate_span_id(),
            is_remote=False,
            trace_flags=flags,
            trace_state=trace_state,
        )
        span = JobSpan(self, name, context, remote, kind, attributes)
        if self.bounded:
            span.bound_attributes()
        return span

    @property
    def lazy(self) -> bool:
        """Whether a carried parent that is sampled or unreadable either way may be read when
        the span's context is first needed (`start_carried`): under the default sampler and
        id generator (which cannot fail and needs no order of calls kept)."""
        return self.sampler is DEFAULT_ON and type(self.id_generator) is RandomIdGenerator

    def start_carried(
        self,
        name: str,
        kind: SpanKind,
        attributes: dict[str, types.AttributeValue],
        traceparent: str,
    ) -> JobSpan:
        """A started, sampled span under the parent a lone `traceparent` gives (only when `lazy`,
        and `carrier.sampled_either_way(traceparent)`). Its ids are made now: its span id, and
        a trace id used only if the value turns out unreadable (the span is then a root); the
        value is read when the span's context is first needed (`resolve`), mostly by the
        exporter."""
        span = JobSpan(self, name, None, None, kind, attributes)
        span.carried = (
            traceparent,
            self.id_generator.generate_trace_id(),
            self.id_generator.generate_span_id(),
        )
        if self.bounded:
            span.bound_attributes()
        return span

    def resolve(
        self, traceparent: str, root_trace_id: int, span_id: int
    ) -> tuple[SpanContext, SpanContext | None]:
        """The context and remote parent `start` gives a span under `traceparent`'s parent.

        Only for values `sampled_either_way` accepts: for those the propagator reads exactly
        what `remote_parent` reads (a sampled parent) or nothing (the span is a root); the
        tests check that against the propagator. Makes no ids and calls nothing that logs,
        so a log filter that reads the current span may run it.
        """
        parent = remote_parent(traceparent)
        if parent is None:
            context = SpanContext(
                root_trace_id, span_id, is_remote=False, trace_flags=FLAGS[True, self.random_roots]
            )
        else:
            context = SpanContext(
                parent.trace_id,
                span_id,
                is_remote=False,
                trace_flags=FLAGS[True, bool(parent.trace_flags & RANDOM)],
                trace_state=parent.trace_state,
            )
        return context, parent

    def _not_recorded(
        self, trace_id: int, random: bool, trace_state: TraceState | None
    ) -> NonRecordingSpan:
        context = SpanContext(
            trace_id,
            self.id_generator.generate_span_id(),
            is_remote=False,
            trace_flags=FLAGS[False, random],
            trace_state=trace_state,
        )
        return NonRecordingSpan(context)


class JobSpan(Span):
    """A recording span that is its own `ReadableSpan` once ended (see the module's doc)."""

    def __init__(
        self,
        factory: JobSpanFactory,
        name: str,
        context: SpanContext | None,
        parent: SpanContext | None,
        kind: SpanKind,
        attributes: dict[str, types.AttributeValue],
    ) -> None:
        """`context` None: a `start_carried` span, whose context and parent come from its
        `traceparent` when first read."""
        self._factory = factory
        self.name = name
        # the context and parent, once known: one attribute, so a reader sees both or neither
        self._read = None if context is None else (context, parent)
        self.kind = kind
        self.attributes: Mapping[str, types.AttributeValue] = attributes
        self.resource = factory.resource
        self.instrumentation_scope = factory.scope
        self.start_time = time_ns()
        self._lock = threading.Lock()  # as the SDK's span: writers from several threads

    # Until first changed (events and links become `BoundedList`s, as the SDK's span keeps them).
    events: Sequence[Event] = ()
    links: Sequence[Link] = ()
    status: Status = UNSET_STATUS
    end_time: int | None = None
    # a `start_carried` span's traceparent, root trace id and span id, until read
    carried: tuple[str, int, int] | None = None

    @property
    def context(self) -> SpanContext:
        read = self._read
        return (read or self._resolved())[0]

    @property
    def parent(self) -> SpanContext | None:
        read = self._read
        return (read or self._resolved())[1]

    def _resolved(self) -> tuple[SpanContext, SpanContext | None]:
        """A `start_carried` span's context and parent, read now. No lock: the reading is
        the same on every thread, and it is published in one assignment."""
        assert self.carried is not None
        read = self._read = self._factory.resolve(*self.carried)
        return read

    def unread_ids(self) -> tuple[bytes, bytes, bytes | None] | None:
        """A `start_carried` span's trace id, span id and parent span id (None: a root) as
        wire bytes, the ones `resolve` gives, while its context is still unread (then it
        stays so); None otherwise. For the encoder: no `SpanContext` is made."""
        carried = self.carried
        if carried is None or self._read is not None:
            return None
        traceparent, root_trace_id, span_id = carried
        parent = remote_parent_ids(traceparent)
        if parent is None:
            return root_trace_id.to_bytes(16, "big"), span_id.to_bytes(8, "big"), None
        return parent[0], span_id.to_bytes(8, "big"), parent[1]

    @property
    def dropped_attributes(self) -> int:
        attributes = self.attributes  # a dict until bounded
        return attributes.dropped if type(attributes) is BoundedAttributes else 0

    @property
    def dropped_events(self) -> int:
        return self.events.dropped if type(self.events) is BoundedList else 0

    @property
    def dropped_links(self) -> int:
        return self.links.dropped if type(self.links) is BoundedList else 0

    def get_span_context(self) -> SpanContext:
        return self.context

    def is_recording(self) -> bool:
        return self.end_time is None

    def end(self, end_time: int | None = None) -> None:
        with self._lock:  # after this no thread changes the span (the exporter reads it)
            if self.end_time is not None:
                log.warning("Calling end() on an ended span.")
                return
            self.end_time = end_time if end_time is not None else time_ns()
        factory = self._factory
        emit = factory.emit_sampled
        if emit is not None and self._read is None and _sdk_on_end(factory.processor):
            emit(self)  # sampled (see `start_carried`): what the SDK's `on_end` would do
        else:
            self._factory.processor.on_end(self)  # type: ignore[arg-type]  # duck-typed ReadableSpan

    def _writable(self) -> bool:
        """Whether the span may still change; called holding `_lock`."""
        if self.end_time is not None:
            log.warning("Setting attribute on ended span.")
            return False
        return True

    def set_attributes(self, attributes: Mapping[str, types.AttributeValue]) -> None:
        for key, value in attributes.items():
            self.set_attribute(key, value)

    def set_attribute(self, key: str, value: types.AttributeValue) -> None:
        with self._lock:
            if not self._writable():
                return
            self.bound_attributes()  # validated from the first write on
            self.attributes[key] = value  # type: ignore[index]  # a BoundedAttributes now

    def bound_attributes(self) -> None:
        """Hold the attributes in a `BoundedAttributes` with the span limits, as the SDK's span."""
        if not isinstance(self.attributes, BoundedAttributes):
            limits = self._factory.limits
            self.attributes = BoundedAttributes(
                limits.max_span_attributes,
                self.attributes,
                immutable=False,
                max_value_len=limits.max_span_attribute_length,
            )

    def add_event(
        self, name: str, attributes: types.Attributes = None, timestamp: int | None = None
    ) -> None:
        limits = self._factory.limits
        bounded = BoundedAttributes(
            limits.max_event_attributes,
            attributes,
            max_value_len=limits.max_attribute_length,
            immutable=True,
        )
        with self._lock:
            if not self._writable():
                return
            if not isinstance(self.events, BoundedList):  # keeps the newest, as the SDK's span
                self.events = BoundedList(limits.max_events)
            self.events.append(Event(name=name, attributes=bounded, timestamp=timestamp))

    def add_link(self, context: SpanContext, attributes: types.Attributes = None) -> None:
        if context is None or not context.is_valid:
            return
        limits = self._factory.limits
        bounded = BoundedAttributes(
            limits.max_link_attributes,
            attributes,
            max_value_len=limits.max_attribute_length,
            immutable=True,
        )
        with self._lock:
            if not self._writable():
                return
            if not isinstance(self.links, BoundedList):
                self.links = BoundedList(limits.max_links)
            self.links.append(Link(context, bounded))

    def update_name(self, name: str) -> None:
        with self._lock:
            if self._writable():
                self.name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        with self._lock:
            if (
                not self._writable() or self.status.status_code is StatusCode.OK
            ):  # final, as in the SDK
                return
            if isinstance(status, Status):
                if status.status_code is not StatusCode.UNSET:
                    self.status = status
            elif status is not StatusCode.UNSET:
                self.status = Status(status, description)

    def record_exception(
        self,
        exception: BaseException,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        """An `exception` event with the same attributes as the SDK's."""
        module = type(exception).__module__
        qualname = type(exception).__qualname__
        event: dict[str, types.AttributeValue] = {
            "exception.type": f"{module}.{qualname}"
            if module and module != "builtins"
            else qualname,
            "exception.message": str(exception),
            "exception.stacktrace": "".join(traceback.format_exception(exception)),
            "exception.escaped": str(escaped),
        }
        if attributes:
            event.update(attributes)
        self.add_event("exception", event, timestamp)
