"""otel: a process span started on a carried parent (`JobSpanFactory.start_carried`) is handed to
the batch processor directly only while its `on_end` is the SDK's own, and draws its ids as the
SDK's span would."""

from __future__ import annotations

import functools
import random
from typing import Any

import pytest
from jobcore_otel.job_span import JobSpanFactory
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import SpanKind
from test_otel_carried_parent import direct_plugin, execute

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def factory_with(processor: BatchSpanProcessor, **options: Any) -> JobSpanFactory:
    provider = TracerProvider(**options)
    provider.add_span_processor(processor)
    return JobSpanFactory(provider, processor, "jobcore")


def test_an_on_end_patched_on_the_processor_instance_sees_the_carried_span() -> None:
    """e.g. `mock.patch.object(processor, "on_end", ...)` or a redacting wrapper: the class's
    on_end is still the SDK's, but the instance's must see the span."""
    processor = BatchSpanProcessor(InMemorySpanExporter())
    seen: list[Any] = []
    original = processor.on_end
    processor.on_end = lambda span: (seen.append(span), original(span))  # type: ignore[method-assign]
    factory = factory_with(processor)
    factory.start_carried("process q", SpanKind.CONSUMER, {}, TRACEPARENT).end()
    processor.shutdown()
    assert len(seen) == 1, "the processor's (instance) on_end was bypassed"


def test_an_on_end_wrapped_with_functools_wraps_sees_the_carried_span(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A wrapper made with functools.wraps (wrapt, most instrumentation) keeps `__module__` and
    the name: it is still not the SDK's own."""
    seen: list[Any] = []
    original = BatchSpanProcessor.on_end

    @functools.wraps(original)
    def on_end(self: BatchSpanProcessor, span: Any) -> None:
        seen.append(span)
        original(self, span)

    monkeypatch.setattr(BatchSpanProcessor, "on_end", on_end)
    processor = BatchSpanProcessor(InMemorySpanExporter())
    factory = factory_with(processor)
    factory.start_carried("process q", SpanKind.CONSUMER, {}, TRACEPARENT).end()
    processor.shutdown()
    assert len(seen) == 1, "a functools.wraps-wrapped on_end was bypassed"


def test_an_on_end_patched_after_the_plugin_is_set_up_sees_the_carried_span(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Checked at each span's end, not once when the factory is built (`OtelPlugin._setup`)."""
    processor = BatchSpanProcessor(InMemorySpanExporter())
    factory = factory_with(processor)
    seen: list[Any] = []
    original = BatchSpanProcessor.on_end
    monkeypatch.setattr(
        BatchSpanProcessor, "on_end", lambda self, span: (seen.append(span), original(self, span))
    )
    factory.start_carried("process q", SpanKind.CONSUMER, {}, TRACEPARENT).end()
    processor.shutdown()
    assert len(seen) == 1, "an on_end patched after set-up was bypassed"


class Counting(IdGenerator):
    """Deterministic ids, as test suites use (span ids and trace ids from one sequence)."""

    def __init__(self) -> None:
        self.n = 0

    def generate_span_id(self) -> int:
        self.n += 1
        return self.n

    def generate_trace_id(self) -> int:
        self.n += 1
        return self.n


def test_a_custom_id_generator_draws_ids_in_the_order_the_sdks_span_would() -> None:
    """Under a valid parent the SDK's span draws a span id only; a span started before its parent
    is read would also draw a trace id (for the root it may be). With an id generator of the
    application's (a sequence, as test suites use) the plugin starts its spans the SDK's way."""
    exporter = InMemorySpanExporter()
    plugin, provider = direct_plugin(exporter, id_generator=Counting())
    assert plugin._spans is not None and not plugin._spans.lazy
    assert execute(plugin, lambda: "ok") == "ok"
    provider.force_flush()
    [span] = exporter.get_finished_spans()
    assert span.context.span_id == 1 and span.parent is not None
    assert span.parent.span_id == int(TRACEPARENT[36:52], 16)


def test_a_trace_id_generator_failure_does_not_untrace_a_job_with_a_valid_parent() -> None:
    """An id generator whose generate_trace_id fails (only roots need one): a job under a carried
    parent is still traced."""

    class NoTraceIds(IdGenerator):
        def generate_span_id(self) -> int:
            return random.getrandbits(64) or 1

        def generate_trace_id(self) -> int:
            raise OSError("no trace ids here")

    exporter = InMemorySpanExporter()
    plugin, provider = direct_plugin(exporter, id_generator=NoTraceIds())
    assert execute(plugin, lambda: "ok") == "ok"
    provider.force_flush()
    assert [span.name for span in exporter.get_finished_spans()] == ["process default"]
