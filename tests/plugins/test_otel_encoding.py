"""The otel plugin's OTLP encoder writes exactly the bytes of the SDK's encoder, for every span shape."""

from __future__ import annotations

from typing import Any

import pytest
from jobcore_otel.job_span import JobSpanFactory
from jobcore_otel.otlp_encoding import SpanEncoder
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
    set_span_in_context,
)

VALUES: dict[str, Any] = {
    "str": "default",
    "empty": "",
    "unicode": "ünï 😀",
    "true": True,
    "false": False,
    "zero": 0,
    "int": 7,
    "big": 2**62,
    "negative": -5,
    "min": -(2**63),
    "float": 1.5,
    "negative zero": -0.0,
    "strings": ("a", "b"),
    "ints": (1, -2),
    "floats": (0.25,),
    "bools": (True, False),
    "empty tuple": (),
    "long": "x" * 300,
}


REMOTE = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, True, TraceFlags(1))


def finished(provider: TracerProvider) -> tuple[ReadableSpan, ...]:
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("jobcore")
    other = provider.get_tracer("other", "1.2", schema_url="https://example.com/s")
    remote = SpanContext(
        0x0AF7651916CD43DD8448EB211C80319C,
        0xB7AD6B7169203331,
        is_remote=True,
        trace_flags=TraceFlags(1),
        trace_state=TraceState([("vendor", "v1"), ("x", "y")]),
    )
    with (
        tracer.start_as_current_span("send default", kind=SpanKind.PRODUCER, attributes=VALUES),
        other.start_as_current_span("inner", attributes={"k": 1}) as inner,
    ):
        inner.add_event("happened", {"a": "b", "n": 3}, timestamp=123)
        inner.add_event("bare")
        inner.set_status(Status(StatusCode.OK))
    with tracer.start_as_current_span(
        "process default",
        context=set_span_in_context(NonRecordingSpan(remote)),
        kind=SpanKind.CONSUMER,
        links=[Link(remote, {"l": "v"}), Link(remote)],
    ) as span:
        span.record_exception(ValueError("bad ünï"))
        span.set_status(Status(StatusCode.ERROR, "ValueError: bad"))
    for kind in SpanKind:
        tracer.start_span(f"k {kind.name}", kind=kind).end()
    return exporter.get_finished_spans()


@pytest.mark.parametrize("limits", [None, SpanLimits(max_attributes=3, max_events=1, max_links=1)])
def test_the_same_bytes_as_the_sdk_encoder(limits: SpanLimits | None) -> None:
    resource = Resource.create({"service.name": "enc", "n": 2, "list": ("a",)}, "https://r/s")
    spans = finished(TracerProvider(resource=resource, span_limits=limits))
    if limits is not None:
        assert any(span.dropped_attributes for span in spans)  # the dropped counts are encoded
    expected = encode_spans(spans).SerializePartialToString()
    encoder = SpanEncoder()
    assert encoder.request(spans) == expected
    assert encoder.request(spans) == expected  # and again from its caches


def test_spans_of_two_resources_are_grouped_by_resource() -> None:
    spans = finished(TracerProvider(resource=Resource.create({"service.name": "a"})))
    spans += finished(TracerProvider(resource=Resource.create({"service.name": "b"})))
    assert SpanEncoder().request(spans) == encode_spans(spans).SerializePartialToString()


def test_an_attribute_that_cannot_be_encoded_is_left_out_as_the_sdk_does(
    caplog: pytest.LogCaptureFixture,
) -> None:
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    span = provider.get_tracer("jobcore").start_span("s", attributes={"ok": 1, "huge": 2**64})
    span.end()
    spans = exporter.get_finished_spans()
    assert SpanEncoder().request(spans) == encode_spans(spans).SerializePartialToString()
    assert "Failed to encode key huge" in caplog.text


def test_many_spans_with_ids_and_job_spans_the_same_bytes_as_the_sdk_encoder() -> None:
    """Past the point where a key's changing values stop being cached, and for `JobSpan`s."""
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    processor = SimpleSpanProcessor(exporter)
    provider.add_span_processor(processor)
    factory = JobSpanFactory(provider, processor, "jobcore")
    parent = set_span_in_context(NonRecordingSpan(REMOTE))
    tracer = provider.get_tracer("jobcore")
    for n in range(300):
        attributes = {"messaging.message.id": f"job-{n}", "jobcore.job.attempt": n % 3, "q": "d"}
        if n % 2:
            span = factory.start("process d", parent, SpanKind.CONSUMER, attributes)
            assert span is not None
            span.end()
        else:
            tracer.start_span("send d", attributes=attributes).end()
    spans = exporter.get_finished_spans()
    encoder = SpanEncoder()
    for batch in (spans[:50], spans[50:], spans):
        assert encoder.request(batch) == encode_spans(batch).SerializePartialToString()


@pytest.mark.parametrize(
    "attributes",
    [{"ok": "v", "bad": "a\udc80b"}, {"ok": "v", "b\ud800d": "v"}, {"bad": ("\ud800",), "ok": 1}],
)
def test_a_string_that_is_not_utf8_leaves_out_its_pair_not_the_batch(
    attributes: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A handler's attribute with a lone surrogate (e.g. from `os.fsdecode`): the SDK drops the
    pair and logs; so must this encoder, not the whole batch of everyone's spans."""
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    processor = SimpleSpanProcessor(exporter)
    provider.add_span_processor(processor)
    provider.get_tracer("jobcore").start_span("before").end()
    span = JobSpanFactory(provider, processor, "jobcore").start(
        "process d", set_span_in_context(NonRecordingSpan(REMOTE)), SpanKind.CONSUMER, {}
    )
    assert span is not None
    span.set_attributes(attributes)
    span.add_event("e", attributes)
    span.end()
    spans = exporter.get_finished_spans()
    encoder = SpanEncoder()
    assert encoder.request(spans) == encode_spans(spans).SerializePartialToString()
    assert encoder.request(spans) == encode_spans(spans).SerializePartialToString()
    assert "Failed to encode key" in caplog.text


def test_a_pair_on_a_span_and_on_its_event_link_and_resource_is_encoded_in_each_place() -> None:
    """The settle spans carry `jobcore.job.attempt` on the span and on its event: the cached
    pair must not come back with the span attribute's field number inside the event."""
    pair = {"jobcore.job.attempt": 1, "k": "v", "b": True}
    provider = TracerProvider(resource=Resource.create(pair))
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    span = provider.get_tracer("jobcore").start_span(
        "settle d", attributes=pair, links=[Link(REMOTE, pair)]
    )
    span.add_event("jobcore.job.retrying", pair)
    span.end()
    spans = exporter.get_finished_spans()
    encoder = SpanEncoder()
    assert encoder.request(spans) == encode_spans(spans).SerializePartialToString()


def test_string_values_either_side_of_one_length_byte_encode_as_the_sdks() -> None:
    """Short string values are written in one step: lengths up to and past one varint byte."""
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("jobcore")
    for n in (0, 1, 121, 122, 123, 124, 125, 126, 200, 20_000):  # ids of 3 to 20,003 bytes
        for round_ in range(70):  # past `_NEW_VALUES`: the key's values stop being cached
            tracer.start_span(
                "s", attributes={"id": f"{round_:03d}" + "x" * n, "wide": "é" * (n // 2)}
            ).end()
    spans = exporter.get_finished_spans()
    assert SpanEncoder().request(spans) == encode_spans(spans).SerializePartialToString()
