"""otel: a process span whose carried parent is read late (`JobSpanFactory.start_carried`) never
hangs a job, never fails one, and never costs other spans. The plugin's process spans are
`JobSpan`s handed to a `BatchSpanProcessor` (so `JobSpan.end` emits such a span unread)."""

from __future__ import annotations

import contextlib
import logging
import threading
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from jobcore_otel import OtelPlugin
from jobcore_otel.otlp_export import OtlpSpanExporter
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import StatusCode
from otlp_receiver import OtlpReceiver

from jobcore import Job, JobContext, JobStatus, JobType, Payload, Queue, hookimpl
from jobcore.testing import drain

MakeQueue = Callable[..., Queue]
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
JOB: dict[str, Any] = dict(
    id="01a21e96-e715-73ea-a173-b3779b9a341e", type="noop", queue="default", payload={},
    status=JobStatus.CLAIMED, priority=0, attempts=1, max_attempts=3, run_at=0, timeout_ms=None,
    idempotency_key=None, locked_by="w", locked_at=0, lease_expires_at=1, heartbeat_at=None,
    cancel_requested=False, last_error=None, errors=[], result=None, parent_id=None,
    meta={"otel": {"traceparent": TRACEPARENT}}, created_at=0, claimed_at=0, completed_at=None,
    updated_at=0,
)  # fmt: skip


def direct_plugin(
    exporter: Any = None, **provider_options: Any
) -> tuple[OtelPlugin, TracerProvider]:
    provider = TracerProvider(**provider_options)
    processor = BatchSpanProcessor(exporter or InMemorySpanExporter())
    provider.add_span_processor(processor)
    plugin = OtelPlugin(provider, MeterProvider(), span_processor=processor)
    plugin._setup()
    assert plugin._spans is not None  # the direct path (JobSpan)
    return plugin, provider


def execute(plugin: OtelPlugin, handler: Callable[[], Any], **job: Any) -> Any:
    """`handler()` inside the plugin's `jobcore_execute_job` wrapper, as pluggy runs it."""
    wrapper = plugin.jobcore_execute_job(Job(**{**JOB, **job}), types.SimpleNamespace(worker="w"))
    next(wrapper)
    try:
        result = handler()
    except BaseException as exc:
        try:
            wrapper.throw(exc)
        except StopIteration as stop:
            return stop.value
        raise
    try:
        wrapper.send(result)
    except StopIteration as stop:
        return stop.value
    raise AssertionError("the wrapper did not finish")


def finishes(target: Callable[[], Any], seconds: float = 5.0) -> bool:
    """Whether `target()` returns or raises within `seconds` (on a thread: a deadlock fails the
    test instead of hanging it); what it returns or raises is the caller's to check."""
    done = threading.Event()

    def run() -> None:
        with contextlib.suppress(BaseException):
            target()
        done.set()

    threading.Thread(target=run, daemon=True).start()
    return done.wait(seconds)


class TraceIdFilter(logging.Filter):
    """The usual 'trace id in every log line' filter (as LoggingInstrumentor or the SDK's
    LoggingHandler read it): the current span's context."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.trace_id = trace.get_current_span().get_span_context().trace_id
        return True


@pytest.fixture
def trace_ids_in_logs() -> Iterator[None]:
    handler = logging.Handler()  # not a NullHandler: its handle() skips the filters
    handler.emit = lambda record: None  # type: ignore[method-assign]
    handler.addFilter(TraceIdFilter())
    root = logging.getLogger()
    root.addHandler(handler)
    yield
    root.removeHandler(handler)


WARNED_WRITES: dict[str, Callable[[Any], None]] = {
    "a string over the length limit": lambda span: span.set_attribute("r", "longer than 8"),
    "an invalid attribute value": lambda span: span.set_attribute("r", object()),
    "an OK status with a description": lambda span: span.set_status(StatusCode.OK, "done"),
}


@pytest.mark.parametrize("write", WARNED_WRITES.values(), ids=WARNED_WRITES.keys())
def test_a_warned_span_write_does_not_deadlock_the_handler(
    trace_ids_in_logs: None, write: Callable[[Any], None]
) -> None:
    """JobSpan.set_attribute / set_status log the SDK's warnings holding the span's lock; a log
    filter reading the current span's context then reads the carried parent on that thread."""
    plugin, _ = direct_plugin(span_limits=SpanLimits(max_span_attribute_length=8))

    def handler() -> str:
        write(trace.get_current_span())
        return "ok"

    assert finishes(lambda: execute(plugin, handler)), "the job's thread deadlocked"


def test_a_handler_that_ends_its_span_and_raises_neither_hangs_nor_stops_the_exporter(
    trace_ids_in_logs: None,
) -> None:
    receiver = OtlpReceiver()
    try:
        plugin, provider = direct_plugin(
            OtlpSpanExporter(endpoint=receiver.endpoint + "/v1/traces")
        )

        def handler() -> None:
            trace.get_current_span().end()
            raise RuntimeError("boom")

        assert finishes(lambda: execute(plugin, handler)), "the job's thread deadlocked"
        assert finishes(provider.force_flush), "the exporter is blocked"
        assert [span["name"] for span in receiver.spans] == ["process default"]
    finally:
        receiver.close()


class FailsOnce(RandomIdGenerator):
    def __init__(self, at: int) -> None:
        self.calls, self.at = 0, at

    def generate_span_id(self) -> int:
        self.calls += 1
        if self.calls == self.at:
            raise OSError("id source unavailable")
        return super().generate_span_id()


def test_one_spans_failure_loses_that_span_only() -> None:
    """A span whose ids cannot be made: that job runs untraced ('could not be started'); the
    exporter's batch, with other jobs' spans and the SDK's own, is exported."""
    receiver = OtlpReceiver()
    try:
        plugin, provider = direct_plugin(
            OtlpSpanExporter(endpoint=receiver.endpoint + "/v1/traces"), id_generator=FailsOnce(5)
        )
        plugin.tracer.start_span("sdk span").end()
        for number in range(8):
            execute(plugin, lambda: "ok", id=f"job-{number}")
        provider.force_flush()
        assert len(receiver.spans) >= 8  # 9 spans, at most the one failed job's lost
    finally:
        receiver.close()


def test_a_span_that_cannot_be_made_never_fails_the_job() -> None:
    """'Tracing never decides a job's outcome': an id generator's failure does not reach the
    handler when it (or a child job's send span) reads the current span's context."""
    plugin, _ = direct_plugin(id_generator=FailsOnce(1))

    def handler() -> str:
        plugin.tracer.start_span("send child").end()  # as ctx.enqueue's send span
        return "ok"

    assert execute(plugin, handler) == "ok"


class ChildPlugin:
    def __init__(self, provider: TracerProvider) -> None:
        self.tracer = provider.get_tracer("an instrumented client")

    @hookimpl
    def jobcore_register_job_types(self, register: Callable[[JobType], None]) -> None:
        def parent(payload: Payload, ctx: JobContext) -> None:
            ctx.enqueue("child", {})

        def client(payload: Payload, ctx: JobContext) -> None:
            with self.tracer.start_as_current_span("GET /api"):  # e.g. an HTTP client's span
                pass

        register(JobType(name="parent", payload_model=Payload, handler=parent))
        register(JobType(name="child", payload_model=Payload, handler=lambda p, c: None))
        register(JobType(name="client", payload_model=Payload, handler=client))


def test_through_a_queue_a_span_that_cannot_be_made_never_fails_the_job(
    jobcore_make_queue: MakeQueue,
) -> None:
    """Ids: 1, the job's send span at enqueue; 2, its process span: it fails at the start (caught,
    the job untraced), not when the handler's client span reads it."""
    plugin, provider = direct_plugin(id_generator=FailsOnce(at=2))
    queue = jobcore_make_queue(plugin, ChildPlugin(provider), backoff_base=0)
    job_id = queue.enqueue("client", {}, max_attempts=1).job.id
    drain(queue)
    job = queue.get(job_id)
    assert job.status == "completed", job.errors


def test_a_child_job_keeps_its_trace_when_the_parents_span_cannot_be_made(
    jobcore_make_queue: MakeQueue,
) -> None:
    """The parent job's process span could not be made: the child still carries the parent job's
    (carried) trace."""
    plugin, provider = direct_plugin(id_generator=FailsOnce(at=2))
    queue = jobcore_make_queue(plugin, ChildPlugin(provider), backoff_base=0)
    parent = queue.enqueue("parent", {}, max_attempts=1).job
    drain(queue)
    assert queue.get(parent.id).status == "completed"
    [child] = queue.list_jobs(types=["child"])
    assert "otel" in child.meta, child.meta
    assert child.meta["otel"]["traceparent"][3:35] == parent.meta["otel"]["traceparent"][3:35]
