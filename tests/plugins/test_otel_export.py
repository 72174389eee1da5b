"""The otel plugin's OTLP span exporter sends what the SDK's would, and refuses what it refuses."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from jobcore_otel.otlp_export import OtlpSpanExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otlp_receiver import OtlpReceiver


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    server = OtlpReceiver()
    yield server
    server.close()


def spans() -> tuple[ReadableSpan, ...]:
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.get_tracer("jobcore").start_span("process q", attributes={"k": "v" * 500}).end()
    return exporter.get_finished_spans()


@pytest.mark.parametrize("limit", [0, 200, 10_000])
def test_a_request_over_max_request_size_is_dropped_as_the_sdks(
    receiver: OtlpReceiver, limit: int
) -> None:
    if "max_request_size" not in OTLPSpanExporter.__init__.__code__.co_varnames:
        pytest.skip("this SDK release has no max_request_size")
    endpoint = f"{receiver.endpoint}/v1/traces"
    results = [
        kind(endpoint=endpoint, max_request_size=limit).export(spans())  # type: ignore[call-arg]
        for kind in (OTLPSpanExporter, OtlpSpanExporter)
    ]
    sent = limit != 200
    assert results == [SpanExportResult.SUCCESS if sent else SpanExportResult.FAILURE] * 2
    assert len(receiver.spans) == (2 if sent else 0)
