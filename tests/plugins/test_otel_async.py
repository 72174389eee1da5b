"""otel plugin and `async def` handlers: the process span covers the awaited handler
(its duration, its exception, its status) on a real worker, spans in an in-memory exporter,
and a `jobcore run` exporting over OTLP/HTTP ends the span of a job its shutdown caught."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jobcore_test_plugin as tp
import pytest
from jobcore_otel import OtelPlugin
from jobcore_otel.job_span import JobSpan
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBasedTraceIdRatio
from opentelemetry.trace import SpanKind, StatusCode
from otlp_receiver import OtlpReceiver
from testenv import subprocess_env, wait_for

from jobcore import JobStatus, Queue
from jobcore.models import Job
from jobcore.testing import drain

MakeQueue = Callable[..., Queue]


class Spans:
    """`direct`: process spans are `JobSpan`s handed straight to the processor."""

    def __init__(self, direct: bool = False) -> None:
        self.direct = direct
        self.exporter = InMemorySpanExporter()
        provider = TracerProvider()
        processor = SimpleSpanProcessor(self.exporter)
        provider.add_span_processor(processor)
        self.plugin = OtelPlugin(
            provider,
            MeterProvider(metric_readers=[InMemoryMetricReader()]),
            span_processor=processor if direct else None,
        )

    def process(self, job_id: str) -> list[ReadableSpan]:
        found = [
            span
            for span in self.exporter.get_finished_spans()
            if span.kind is SpanKind.CONSUMER
            and (span.attributes or {}).get("messaging.message.id") == job_id
        ]
        assert all(isinstance(span, JobSpan) == self.direct for span in found)  # the path taken
        return found


def seconds(span: ReadableSpan) -> float:
    assert span.start_time is not None and span.end_time is not None
    return (span.end_time - span.start_time) / 1e9


@pytest.fixture(params=["sdk-span", "job-span"])
def spans(request: pytest.FixtureRequest) -> Spans:
    return Spans(direct=request.param == "job-span")


@pytest.fixture
def queue(jobcore_make_queue: MakeQueue, spans: Spans) -> Queue:
    return jobcore_make_queue(spans.plugin, tp, modules=["jobcore_async_plugin"])


def test_the_span_of_an_async_handler_lasts_as_long_as_the_awaited_handler(
    queue: Queue, spans: Spans, tmp_path: Path
) -> None:
    log = str(tmp_path / "notes")
    slow = queue.enqueue("async_job", {"log": log, "sleep": 0.2}).job
    quick = queue.enqueue("async_job", {"log": log}).job
    drain(queue, async_concurrency=4)
    assert queue.get(slow.id).status == "completed"
    [span] = spans.process(slow.id)
    assert seconds(span) >= 0.2  # it ended after the handler's await, not when the hook returned
    assert span.status.status_code is StatusCode.UNSET and not span.events
    [other] = spans.process(quick.id)
    assert seconds(other) < 0.2


def test_an_async_handlers_exception_is_on_its_span(
    queue: Queue, spans: Spans, tmp_path: Path
) -> None:
    job = queue.enqueue(
        "async_job", {"log": str(tmp_path / "notes"), "sleep": 0.2, "how": "error"}, max_attempts=1
    ).job
    drain(queue)
    assert queue.get(job.id).status == "failed"
    [span] = spans.process(job.id)
    assert seconds(span) >= 0.2
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "ValueError: async handler failed as asked"
    [event] = span.events
    assert event.name == "exception" and (event.attributes or {})["exception.type"] == "ValueError"


def test_a_cancelled_async_handler_records_its_cancellation(
    queue: Queue, spans: Spans, tmp_path: Path
) -> None:
    job = queue.enqueue(
        "async_job", {"log": str(tmp_path / "notes"), "sleep": 600}, timeout=1, max_attempts=1
    ).job
    drain(queue)
    assert queue.get(job.id).status == "failed"
    [span] = spans.process(job.id)
    assert 1 <= seconds(span) < 60
    assert span.status.status_code is StatusCode.ERROR
    assert [e.name for e in span.events] == ["exception"]
    kind = str((span.events[0].attributes or {})["exception.type"])
    assert kind.endswith("CancelledError")


def test_a_child_of_an_async_handler_joins_its_trace(
    queue: Queue, spans: Spans, tmp_path: Path
) -> None:
    """The process span is current in the handler's own task, where its children are enqueued."""
    parent = queue.enqueue("async_job", {"log": str(tmp_path / "notes"), "how": "child"}).job
    drain(queue)
    [process] = spans.process(parent.id)
    [child_send] = [
        span
        for span in spans.exporter.get_finished_spans()
        if (span.attributes or {}).get("jobcore.job.parent_id") == parent.id
    ]
    assert child_send.parent is not None and child_send.parent.span_id == process.context.span_id
    assert child_send.context.trace_id == process.context.trace_id


@pytest.mark.parametrize("direct", [False, True])
def test_a_sampled_out_async_job_passes_its_trace_on_to_its_children(
    jobcore_make_queue: MakeQueue, tmp_path: Path, direct: bool
) -> None:
    """No process span is made, but the trace context is current in the handler's task."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ParentBasedTraceIdRatio(0.0))  # keep no trace
    processor = SimpleSpanProcessor(exporter)
    provider.add_span_processor(processor)
    plugin = OtelPlugin(
        provider,
        MeterProvider(metric_readers=[InMemoryMetricReader()]),
        span_processor=processor if direct else None,
    )
    queue = jobcore_make_queue(plugin, tp, modules=["jobcore_async_plugin"])
    parent = queue.enqueue("async_job", {"log": str(tmp_path / "notes"), "how": "child"}).job
    drain(queue)
    assert exporter.get_finished_spans() == ()
    [child] = [job for job in queue.list_jobs() if job.parent_id == parent.id]
    assert queue.get(child.id).status == "completed"

    def trace_of(job_id: str) -> str:
        return str(queue.get(job_id).meta["otel"]["traceparent"].split("-")[1])

    assert trace_of(child.id) == trace_of(parent.id)


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    server = OtlpReceiver()
    yield server
    server.close()


def run_until_sigterm(
    receiver: OtlpReceiver, db: str, *, plugins: str, signal_when: Callable[[], bool] | None = None
) -> subprocess.CompletedProcess[str]:
    """`jobcore run --shutdown-timeout 0` exporting to `receiver`, stop grace 0.5s; SIGTERMed
    once `signal_when()` holds (or by a plugin of its own); ended: every export arrived."""
    env = subprocess_env(
        JOBCORE_DB=db,
        JOBCORE_PLUGINS=f"jobcore_test_plugin,jobcore_async_plugin{plugins}",
        JOBCORE_STOP_GRACE="0.5",
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
        OTEL_METRICS_EXPORTER="none",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobcore", "run", "--shutdown-timeout", "0"],
        env=env,
        cwd=Path(db).parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        if signal_when is not None:
            wait_for(signal_when, timeout=60)
            proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def process_spans(receiver: OtlpReceiver) -> list[dict[str, Any]]:
    return [span for span in receiver.spans if span["name"] == "process default"]


def test_a_shutdown_before_an_async_handlers_first_step_still_ends_its_span(
    receiver: OtlpReceiver, jobcore_make_queue: MakeQueue, tmp_path: Path
) -> None:
    """The shutdown cancels the handler's task before its first step (made certain by
    `jobcore_async_race_plugin`): the coroutine the otel wrapper returned is never awaited,
    and its span still ends, once, as cancelled; the job is released, its attempt given back."""
    db, notes = str(tmp_path / "jobs.db"), str(tmp_path / "notes")
    producer = jobcore_make_queue(tp, db=db, modules=["jobcore_async_plugin"])
    job = producer.enqueue("async_job", {"log": notes, "how": "stop_before_start"}).job
    ran = run_until_sigterm(receiver, db, plugins=",jobcore_async_race_plugin")
    assert ran.returncode == 0, ran.stderr
    assert Path(notes).read_text().split() == ["race-set", job.id]  # the handler never began
    after = producer.get(job.id)
    assert (after.status, after.attempts, after.errors) == (JobStatus.PENDING, 0, [])
    process = process_spans(receiver)
    assert [span["attributes"]["messaging.message.id"] for span in process] == [job.id]
    assert process[0]["status"] == 2 and process[0]["events"] == ["exception"]  # ERROR
    assert "never awaited" not in ran.stderr  # the handler's coroutine was closed


def _left_behind_at_sigterm(
    receiver: OtlpReceiver, make_queue: MakeQueue, notes: Path, how: str
) -> tuple[Queue, Job, subprocess.CompletedProcess[str]]:
    """An `async_job` doing `how` (600 s) in `run_until_sigterm`, SIGTERMed once its handler
    began: the producer, the job, and the ended worker."""
    db = str(notes.parent / "jobs.db")
    producer = make_queue(tp, db=db, modules=["jobcore_async_plugin"])
    job = producer.enqueue("async_job", {"log": str(notes), "sleep": 600, "how": how}).job
    ran = run_until_sigterm(
        receiver,
        db,
        plugins="",
        signal_when=lambda: notes.exists() and "start" in notes.read_text(),
    )
    return producer, job, ran


def test_a_handler_left_behind_at_shutdown_still_ends_its_span(
    receiver: OtlpReceiver, jobcore_make_queue: MakeQueue, tmp_path: Path
) -> None:
    """A handler that ignores every cancellation is left behind once its stop grace passed;
    the worker closes it as its loop ends, so its span ends (once) before the last export."""
    notes = tmp_path / "notes"
    producer, job, ran = _left_behind_at_sigterm(
        receiver, jobcore_make_queue, notes, "ignore_cancel"
    )
    assert ran.returncode == 0, ran.stderr
    assert f"job {job.id}: its async handler ignored cancellation" in ran.stderr
    assert producer.get(job.id).status is JobStatus.PENDING
    process = process_spans(receiver)
    assert [span["attributes"]["messaging.message.id"] for span in process] == [job.id]
    assert process[0]["status"] == 2 and process[0]["events"] == ["exception"]  # ERROR
    assert "Failed to detach context" not in ran.stderr


def test_a_handler_left_behind_that_awaits_while_closed_still_ends_its_span(
    receiver: OtlpReceiver, jobcore_make_queue: MakeQueue, tmp_path: Path
) -> None:
    """Left behind, and its `finally` awaits again when closed: the close fails in the
    handler (RuntimeError), the span still ends once, with no context error in the log."""
    notes = tmp_path / "notes"
    _, job, ran = _left_behind_at_sigterm(
        receiver, jobcore_make_queue, notes, "ignore_cancel_await"
    )
    assert ran.returncode == 0, ran.stderr
    assert "finally-awaited" not in notes.read_text()
    process = process_spans(receiver)
    assert [span["attributes"]["messaging.message.id"] for span in process] == [job.id]
    assert process[0]["status"] == 2  # ERROR
    assert "Failed to detach context" not in ran.stderr
