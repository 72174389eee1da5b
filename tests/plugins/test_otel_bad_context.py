"""otel: a trace context in `meta` that cannot be read never decides a job's outcome (issue 22.15)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import jobcore_test_plugin as tp
import pytest
from jobcore_otel import OtelPlugin
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from jobcore import JobContext, JobType, Payload, PermanentError, Queue, hookimpl
from jobcore.testing import drain

MakeQueue = Callable[..., Queue]
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.mark.parametrize(
    "carrier",
    [
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ["traceparent", TRACEPARENT],
        7,
        {"traceparent": 5},
        {"traceparent": [TRACEPARENT]},
        {"traceparent": None},
        {"traceparent": TRACEPARENT, "tracestate": {"a": "b"}},
    ],
)
def test_a_bad_context_is_ignored_and_the_job_traced_as_a_new_trace(
    jobcore_make_queue: MakeQueue,
    jobcore_db: str,
    carrier: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    plugin = OtelPlugin(provider, MeterProvider())
    producer = jobcore_make_queue(tp)  # enqueues without the otel plugin: meta as given
    good = producer.enqueue("flaky", {"fail_times": 1}, meta={"otel": {"traceparent": TRACEPARENT}})
    bad = producer.enqueue("flaky", {"fail_times": 1}, meta={"otel": carrier})
    traced = jobcore_make_queue(plugin, tp, db=jobcore_db, backoff_base=0)
    with caplog.at_level(logging.DEBUG, logger="jobcore.otel"):
        drain(traced)
    for result in (good, bad):
        job = traced.get(result.job.id)
        assert (job.status, job.attempts) == ("completed", 2), job.errors
        assert [e["error"] for e in job.errors] == ["ConnectionError: flaky on attempt 1"]
    warnings = [
        r for r in caplog.records if r.name == "jobcore.otel" and r.levelno >= logging.WARNING
    ]
    assert [bad.job.id in r.getMessage() for r in warnings] == [True]  # once, naming the job
    processes = [s for s in spans.get_finished_spans() if s.name == "process default"]
    by_job = {}
    for span in processes:
        by_job.setdefault(span.attributes["messaging.message.id"], []).append(span)
    assert {span.parent is None for span in by_job[bad.job.id]} == {True}  # fresh roots
    good_traces = {format(s.context.trace_id, "032x") for s in by_job[good.job.id]}
    assert good_traces == {TRACEPARENT.split("-")[1]}  # a good context is still followed


class Unprintable(PermanentError):
    def __str__(self) -> str:
        raise RuntimeError("no text for this error")


class UnprintablePlugin:
    @hookimpl
    def jobcore_register_job_types(self, register: Callable[[JobType], None]) -> None:
        def handler(payload: Payload, ctx: JobContext) -> None:
            raise Unprintable()

        register(JobType(name="unprintable", payload_model=Payload, handler=handler))


def test_an_exception_the_span_cannot_describe_keeps_its_outcome(
    jobcore_make_queue: MakeQueue,
) -> None:
    plugin = OtelPlugin(TracerProvider(), MeterProvider())
    queue = jobcore_make_queue(plugin, UnprintablePlugin(), backoff_base=0)
    job_id = queue.enqueue("unprintable", {}, max_attempts=3).job.id
    drain(queue)
    job = queue.get(job_id)
    assert (job.status, job.attempts) == ("failed", 1)  # permanent, as the handler raised
