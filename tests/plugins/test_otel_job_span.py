"""`JobSpan` records what the SDK's span records, and the fast trace-context read equals the propagator's."""

from __future__ import annotations

import random
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest
from jobcore_otel.carrier import (
    PROPAGATOR,
    extract,
    lone_traceparent,
    remote_parent,
    sampled_either_way,
)
from jobcore_otel.histograms import JobHistogram
from jobcore_otel.job_span import JobSpan, JobSpanFactory
from jobcore_otel.otlp_encoding import SpanEncoder
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    DEFAULT_ON,
    Decision,
    ParentBased,
    Sampler,
    SamplingResult,
    StaticSampler,
    TraceIdRatioBased,
)
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
    get_current_span,
    set_span_in_context,
)

PARENT = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, True, TraceFlags(1))
ATTRIBUTES = {"messaging.system": "jobcore", "jobcore.job.attempt": 1}


def raised() -> ValueError:
    try:
        raise ValueError("bad ünï")
    except ValueError as exc:
        return exc


ERROR = raised()  # one exception, so both spans carry the same stack trace


def exercise(span: Span) -> None:
    """Everything a handler may do to the current span, including what the limits drop."""
    span.set_attribute("user.int", 3)
    span.set_attributes({"user.list": ["a", "b"], "user.float": 0.5, "user.long": "x" * 50})
    span.set_attribute("user.bad", {"a": "dict"})  # type: ignore[arg-type]  # rejected, as the SDK does
    span.add_event("one", {"k": "v"}, timestamp=1)
    span.add_event("two", {f"k{i}": i for i in range(5)}, timestamp=2)
    span.add_event("three", timestamp=3)
    span.add_link(SpanContext(PARENT.trace_id, 0x1234, False, TraceFlags(1)), {"l": 1})
    span.add_link(SpanContext(PARENT.trace_id, 0x5678, False, TraceFlags(1)))
    span.update_name("renamed")
    span.record_exception(ERROR, {"extra": True}, timestamp=4)
    span.set_status(Status(StatusCode.ERROR, "ValueError: bad"))
    span.set_status(StatusCode.UNSET)  # ignored
    span.end(end_time=10)
    span.set_attribute("after.end", 1)  # ignored
    span.end()  # ignored


def request(spans: Any) -> ExportTraceServiceRequest:
    """The spans as OTLP, with what differs by run (span ids, start times) cleared."""
    message = ExportTraceServiceRequest.FromString(encode_spans(spans).SerializePartialToString())
    for resource in message.resource_spans:
        for scope in resource.scope_spans:
            for span in scope.spans:
                span.ClearField("span_id")
                span.ClearField("start_time_unix_nano")
    return message


@pytest.mark.parametrize(
    "limits",
    [SpanLimits(), SpanLimits(max_attributes=4, max_events=2, max_links=1, max_attribute_length=8)],
)
def test_a_job_span_records_what_an_sdk_span_records(limits: SpanLimits) -> None:
    made: list[list[Any]] = []
    for direct in (False, True):
        provider = TracerProvider(span_limits=limits)
        exporter = InMemorySpanExporter()
        processor = SimpleSpanProcessor(exporter)
        provider.add_span_processor(processor)
        parent = set_span_in_context(NonRecordingSpan(PARENT))
        if direct:
            span: Span | None = JobSpanFactory(provider, processor, "jobcore").start(
                "process q", parent, SpanKind.CONSUMER, dict(ATTRIBUTES)
            )
            assert isinstance(span, JobSpan)
        else:
            span = provider.get_tracer("jobcore").start_span(
                "process q", parent, SpanKind.CONSUMER, dict(ATTRIBUTES)
            )
        assert span is not None and span.is_recording()
        exercise(span)
        assert not span.is_recording()
        made.append(list(exporter.get_finished_spans()))
    sdk, job = made
    assert len(job) == 1 and job[0].get_span_context().trace_id == PARENT.trace_id
    assert request(job) == request(sdk)
    assert job[0].parent == PARENT and job[0].context.trace_flags.sampled


def test_start_attributes_are_bounded_by_the_span_limits_as_the_sdks() -> None:
    made = []
    for direct in (False, True):
        provider = TracerProvider(span_limits=SpanLimits(max_span_attribute_length=4))
        exporter = InMemorySpanExporter()
        processor = SimpleSpanProcessor(exporter)
        provider.add_span_processor(processor)
        attributes = {"messaging.message.id": "0123456789", "n": 1}
        if direct:
            span = JobSpanFactory(provider, processor, "jobcore").start(
                "p", Context(), SpanKind.CONSUMER, attributes
            )
            assert isinstance(span, JobSpan)
        else:
            span = provider.get_tracer("jobcore").start_span("p", attributes=attributes)
        span.end()
        made.append(dict(exporter.get_finished_spans()[0].attributes or {}))
    assert made[0] == made[1] == {"messaging.message.id": "0123", "n": 1}


def test_a_sampler_that_drops_makes_no_job_span_and_one_that_records_only_exports_none() -> None:
    provider = TracerProvider(sampler=ParentBased(ALWAYS_OFF))
    exporter = InMemorySpanExporter()
    processor = SimpleSpanProcessor(exporter)
    provider.add_span_processor(processor)
    factory = JobSpanFactory(provider, processor, "jobcore")
    root = factory.start(
        "process q", set_span_in_context(NonRecordingSpan(PARENT)), SpanKind.CONSUMER, {}
    )
    assert root is not None  # a sampled parent is followed
    assert not factory.start(
        "process q", get_current_context_root(), SpanKind.CONSUMER, {}
    ).is_recording()
    factory.sampler = StaticSampler(Decision.RECORD_ONLY)
    recording = factory.start("process q", get_current_context_root(), SpanKind.CONSUMER, {})
    assert recording is not None and not recording.context.trace_flags.sampled
    recording.end()
    root.end()
    assert [span.name for span in exporter.get_finished_spans()] == [
        "process q"
    ]  # only the sampled


@pytest.mark.parametrize("sampler", [DEFAULT_ON, ParentBased(ALWAYS_ON)])  # directly, and asked
def test_the_default_sampler_follows_the_parent_and_samples_roots(sampler: Any) -> None:
    provider = TracerProvider(sampler=sampler)
    exporter = InMemorySpanExporter()
    processor = SimpleSpanProcessor(exporter)
    provider.add_span_processor(processor)
    factory = JobSpanFactory(provider, processor, "jobcore")
    state = TraceState([("vendor", "v1")])
    unsampled = SpanContext(PARENT.trace_id, PARENT.span_id, True, TraceFlags(0), state)
    sampled = SpanContext(PARENT.trace_id, PARENT.span_id, True, TraceFlags(1), state)
    dropped = factory.start(
        "p", set_span_in_context(NonRecordingSpan(unsampled)), SpanKind.CONSUMER, {}
    )
    assert not dropped.is_recording() and not dropped.get_span_context().trace_flags.sampled
    assert dropped.get_span_context().trace_id == PARENT.trace_id
    assert dropped.get_span_context().trace_state == state
    child = factory.start(
        "p", set_span_in_context(NonRecordingSpan(sampled)), SpanKind.CONSUMER, {}
    )
    root = factory.start("p", Context(), SpanKind.CONSUMER, {"a": 1})
    assert isinstance(child, JobSpan) and isinstance(root, JobSpan)
    assert child.context.trace_state == state and child.context.trace_flags.sampled
    assert root.context.trace_id != PARENT.trace_id and root.context.trace_flags.sampled
    assert dict(root.attributes) == {"a": 1} and root.parent is None


def get_current_context_root() -> Any:
    from opentelemetry.context import Context

    return Context()  # no parent: a new trace


def test_with_the_sdk_disabled_the_plugin_makes_no_job_spans(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from jobcore_otel import OtelPlugin

    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    plugin = OtelPlugin(env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"})
    plugin._setup()
    assert plugin._spans is None
    assert not isinstance(plugin.duration, JobHistogram)
    plugin.tracer_provider.shutdown()
    plugin.meter_provider.shutdown()


CARRIERS: list[dict[str, str]] = [
    {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
    {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"},
    {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-ff"},
    {"traceparent": "00-00000000000000000000000000000000-b7ad6b7169203331-01"},
    {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01"},
    {"traceparent": "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01"},
    {"traceparent": "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
    {"traceparent": "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra"},
    {"traceparent": " 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01 "},
    {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\n"},
    {"traceparent": "garbage"},
    {"traceparent": ""},
    {"other": "x"},
    {},
    {
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "tracestate": "vendor=v1,x=y",
    },
]


@pytest.mark.parametrize("carrier", CARRIERS)
def test_the_direct_traceparent_read_equals_the_propagators(carrier: dict[str, str]) -> None:
    read: Callable[[dict[str, str]], Any] = extract
    mine, theirs = get_current_span(read(carrier)), get_current_span(PROPAGATOR.extract(carrier))
    assert mine.get_span_context() == theirs.get_span_context()
    assert mine.get_span_context().trace_state == theirs.get_span_context().trace_state
    assert type(mine) is type(theirs)


@pytest.mark.parametrize(
    "meta",
    [{"otel": carrier} for carrier in CARRIERS]
    + [{}, {"otel": None}, {"otel": "x"}, {"otel": {"traceparent": 7}}, {"otel": [CARRIERS[0]]}],
)
def test_the_process_spans_parent_read_without_a_context_is_the_propagators(
    meta: dict[str, Any],
) -> None:
    """The worker's fast read of `meta.otel` takes the common carrier; whatever it takes, it
    reads as the propagator does (anything else goes the general way)."""
    traceparent = lone_traceparent(meta)
    remote = None if traceparent is None else remote_parent(traceparent)
    if meta == {"otel": CARRIERS[0]}:
        assert remote is not None  # the carrier the plugin itself writes
    if remote is not None:
        assert remote == get_current_span(PROPAGATOR.extract(meta["otel"])).get_span_context()
        assert remote.is_remote and remote.trace_state == TraceState()


@pytest.mark.parametrize("sampled", [True, False])
def test_a_remote_parent_given_directly_is_sampled_as_the_same_parent_in_a_context(
    sampled: bool,
) -> None:
    """`start(..., parent=None, remote=...)` asks a sampler other than the default with the
    context the remote parent would have been in."""
    provider = TracerProvider(sampler=ParentBased(ALWAYS_OFF))
    processor = SimpleSpanProcessor(InMemorySpanExporter())
    factory = JobSpanFactory(provider, processor, "jobcore")
    remote = SpanContext(PARENT.trace_id, PARENT.span_id, True, TraceFlags(int(sampled)))
    direct = factory.start("p", None, SpanKind.CONSUMER, {}, remote)
    contextual = factory.start(
        "p", set_span_in_context(NonRecordingSpan(remote)), SpanKind.CONSUMER, {}
    )
    assert direct.is_recording() == contextual.is_recording() == sampled
    assert direct.get_span_context().trace_id == PARENT.trace_id
    if sampled:
        assert isinstance(direct, JobSpan) and direct.parent == remote
    root = factory.start("p", None, SpanKind.CONSUMER, {}, None)
    assert not root.is_recording()  # ParentBased(ALWAYS_OFF): a root is dropped


def mutated_traceparents(count: int) -> list[str]:
    """Version-00 traceparents with one or two characters changed (seeded: the same each run)."""
    rng = random.Random(20261127)
    valid = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    zeros = "00-00000000000000000000000000000000-0000000000000000-01"
    made = []
    for _ in range(count):
        chars = list(rng.choice((valid, zeros, valid.upper())))
        for _ in range(rng.randint(1, 2)):
            chars[rng.randrange(len(chars))] = rng.choice("0123456789abcdefABCDEFg- \t")
        made.append("".join(chars))
    return [*made, valid, zeros, valid[:-1] + "3", valid[:-1] + "f", valid[:-1] + "0"]


def test_a_parent_read_late_is_the_propagators_and_sampled_whenever_one_is_read_late() -> None:
    """`sampled_either_way` lets the worker start a sampled span before reading its parent:
    sound only if every such value the propagator reads gives a sampled parent."""
    provider = TracerProvider()
    processor = SimpleSpanProcessor(InMemorySpanExporter())
    factory = JobSpanFactory(provider, processor, "jobcore")
    late = 0
    for traceparent in mutated_traceparents(3000):
        theirs = get_current_span(PROPAGATOR.extract({"traceparent": traceparent}))
        expected = theirs.get_span_context()
        if not sampled_either_way(traceparent):
            continue
        late += 1
        assert not expected.is_valid or expected.trace_flags.sampled, traceparent
        context, parent = factory.resolve(traceparent, PARENT.trace_id + 1, 7)
        eager = factory.start(
            "p", set_span_in_context(theirs), SpanKind.CONSUMER, {}
        )  # the span `start` makes under the propagator's reading
        assert isinstance(eager, JobSpan)
        assert parent == (expected if expected.is_valid else None), traceparent
        assert context.trace_flags == eager.context.trace_flags
        assert context.trace_state == eager.context.trace_state
        assert context.span_id == 7  # the ids made at start
        assert context.trace_id == (expected.trace_id if expected.is_valid else PARENT.trace_id + 1)
    assert late > 300  # the test reached the late reads it is about


def test_the_encoder_writes_an_unread_carried_span_as_it_writes_it_once_read() -> None:
    """The exporter writes a late-read span's ids from its `traceparent` without reading it
    (`JobSpan.unread_ids`): the same bytes as after reading it, and as the SDK's encoder."""
    provider = TracerProvider()
    factory = JobSpanFactory(provider, SimpleSpanProcessor(InMemorySpanExporter()), "jobcore")
    written, roots = 0, 0
    for n, traceparent in enumerate(mutated_traceparents(3000)):
        if not sampled_either_way(traceparent):
            continue
        span = factory.start_carried("p", SpanKind.CONSUMER, {"n": n}, traceparent)
        span.end_time = span.start_time + 1
        assert span.unread_ids() is not None
        unread = SpanEncoder().request([span])
        assert span.unread_ids() is not None  # writing it read nothing
        roots += span.parent is None
        assert span.unread_ids() is None  # read now: the encoder takes the context
        assert SpanEncoder().request([span]) == unread, traceparent
        if n % 10 == 0:
            assert encode_spans([span]).SerializePartialToString() == unread, traceparent
        written += 1
    assert written > 300 and 0 < roots < written  # both kinds: under a parent, and roots


def test_a_span_started_on_a_carried_parent_reads_it_only_when_asked_and_exports_the_same() -> None:
    exporter = InMemorySpanExporter()
    processor = BatchSpanProcessor(exporter)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    factory = JobSpanFactory(provider, processor, "jobcore")
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    late = factory.start_carried("process q", SpanKind.CONSUMER, {"a": 1}, traceparent)
    late.set_attribute("b", 2)
    late.end()
    if hasattr(processor, "_batch_processor"):  # the SDK's since 1.29: handed to it unread
        assert late._read is None  # (read when exported, on the exporter's thread)
    asked = factory.start_carried("process q", SpanKind.CONSUMER, {"a": 1}, traceparent)
    assert asked.get_span_context().trace_id == PARENT.trace_id  # a child job's send span asks
    asked.end()
    processor.force_flush()
    exported = exporter.get_finished_spans()
    assert [id(span) for span in exported] == [id(late), id(asked)]
    for span in exported:
        assert span.parent == PARENT and span.context.trace_id == PARENT.trace_id
        assert span.context.trace_flags.sampled and span.context.span_id != PARENT.span_id
    assert late.context.span_id != asked.context.span_id
    assert dict(late.attributes) == {"a": 1, "b": 2}
    expected = encode_spans(exported).SerializePartialToString()
    assert SpanEncoder().request(exported) == expected
    provider.shutdown()


class DropsProcessSpans(Sampler):
    """Samples every root but a `process` span (as a ratio sampler may decide for a trace id)."""

    def should_sample(
        self, parent_context: Any, trace_id: int, name: str, *args: Any, **kwargs: Any
    ) -> SamplingResult:
        decision = Decision.DROP if name.startswith("process") else Decision.RECORD_AND_SAMPLE
        return SamplingResult(decision)

    def get_description(self) -> str:
        return "DropsProcessSpans"


@pytest.mark.parametrize(
    "sampler", [ParentBased(DropsProcessSpans()), ParentBased(TraceIdRatioBased(0.0))]
)
def test_a_child_of_a_sampled_out_job_span_is_sampled_as_under_the_sdks(sampler: Any) -> None:
    """A job without a trace context whose process span is sampled out: a child job's `send` span
    started while it runs is in the same trace and sampled out too, as under the SDK's span
    (not a new root trace of its own, an orphan of a trace nobody kept)."""
    provider = TracerProvider(sampler=sampler)
    exporter = InMemorySpanExporter()
    processor = SimpleSpanProcessor(exporter)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("jobcore")
    factory = JobSpanFactory(provider, processor, "jobcore")
    made = []
    for process in (
        tracer.start_span("process q", context=Context(), kind=SpanKind.CONSUMER),
        factory.start("process q", Context(), SpanKind.CONSUMER, {}),
    ):
        assert not process.is_recording()
        child = tracer.start_span("send q", context=set_span_in_context(process, Context()))
        assert child.get_span_context().trace_id == process.get_span_context().trace_id
        made.append((child.is_recording(), child.get_span_context().trace_flags))
        assert not child.get_span_context().trace_flags.sampled
        child.end()
        process.end()
    assert made[0] == made[1]
    assert exporter.get_finished_spans() == ()


@pytest.mark.parametrize("flags", [0, 1, 2, 3])
def test_trace_flags_are_the_sdks_for_roots_and_children(flags: int) -> None:
    """Newer SDKs mark roots with random trace ids (W3C flag 0x02) and children inherit it;
    child jobs carry these flags on in their `traceparent`."""
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    processor = SimpleSpanProcessor(exporter)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("jobcore")
    factory = JobSpanFactory(provider, processor, "jobcore")
    parent = SpanContext(PARENT.trace_id, PARENT.span_id, True, TraceFlags(flags))
    for context in (Context(), set_span_in_context(NonRecordingSpan(parent))):
        sdk = tracer.start_span("p", context=context, kind=SpanKind.CONSUMER)
        job = factory.start("p", context, SpanKind.CONSUMER, {})
        assert job.get_span_context().trace_flags == sdk.get_span_context().trace_flags
        assert job.is_recording() == sdk.is_recording()


def test_four_threads_writing_one_job_span_lose_nothing_and_none_writes_after_its_end() -> None:
    """A handler fanning out to threads that annotate the current span: the SDK's span takes a
    lock; without one, concurrent first events or attributes replaced each other's lists."""
    provider = TracerProvider(span_limits=SpanLimits(max_events=1000, max_attributes=1000))
    exporter = InMemorySpanExporter()
    processor = SimpleSpanProcessor(exporter)
    provider.add_span_processor(processor)
    factory = JobSpanFactory(provider, processor, "jobcore")
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        for _ in range(40):
            span = factory.start("process q", Context(), SpanKind.CONSUMER, {"a": 1})
            barrier = threading.Barrier(4)

            def write(n: int, span: Span = span, barrier: threading.Barrier = barrier) -> None:
                barrier.wait()
                for i in range(10):
                    span.add_event(f"e{n}.{i}")
                    span.set_attribute(f"k{n}.{i}", i)

            threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            span.end()
    finally:
        sys.setswitchinterval(interval)
    for finished in exporter.get_finished_spans():
        assert len(finished.events) == 40 and len(finished.attributes or {}) == 41
    span.set_status(Status(StatusCode.ERROR, "late"))  # ignored after the end, as the SDK does
    span.set_attribute("late", 1)
    span.add_event("late")
    assert span.status.status_code is StatusCode.UNSET
    assert "late" not in (span.attributes or {}) and len(span.events) == 40
