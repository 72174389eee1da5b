"""otel plugin: exact span trees and metrics with in-memory exporters, and OTLP/HTTP end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jobcore_test_plugin as tp
import pytest
from jobcore_otel import InertOtel, MisconfiguredOtel, OtelPlugin, load_plugin
from jobcore_otel.histograms import FOLD_AT, JobHistogram
from jobcore_otel.job_span import JobSpan
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBasedTraceIdRatio
from opentelemetry.trace import SpanKind, StatusCode
from otlp_receiver import OtlpReceiver
from testenv import subprocess_env

from jobcore import ConfigError, Queue, make_plugin_manager, operating
from jobcore.storage.sqlite import SQLiteStorage
from jobcore.testing import drain

MakeQueue = Callable[..., Queue]


class Telemetry:
    """The plugin with in-memory exporters; `direct`: process spans are `JobSpan`s handed
    straight to the processor (as with the OTLP exporter built from `OTEL_*`)."""

    def __init__(self, direct: bool = False) -> None:
        self.direct = direct
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        processor = SimpleSpanProcessor(self.spans)
        self.tracer_provider.add_span_processor(processor)
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.plugin = OtelPlugin(
            self.tracer_provider,
            self.meter_provider,
            span_processor=processor if direct else None,
        )

    def finished(self) -> list[ReadableSpan]:
        spans = sorted(self.spans.get_finished_spans(), key=lambda s: s.start_time or 0)
        for span in spans:  # the path under test is the one taken
            assert isinstance(span, JobSpan) == (self.direct and span.name.startswith("process"))
        return spans

    def metrics(self) -> dict[str, list[Any]]:
        data = self.reader.get_metrics_data()
        found: dict[str, list[Any]] = {}
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    found.setdefault(metric.name, []).extend(metric.data.data_points)
        return found


@pytest.fixture(params=["sdk-span", "job-span"])
def telemetry(request: pytest.FixtureRequest) -> Telemetry:
    return Telemetry(direct=request.param == "job-span")


@pytest.fixture
def queue(jobcore_make_queue: MakeQueue, telemetry: Telemetry) -> Queue:
    return jobcore_make_queue(telemetry.plugin, tp)


def describe(span: ReadableSpan, spans: list[ReadableSpan]) -> tuple[str, str, str | None, str]:
    by_id = {s.context.span_id: s.name for s in spans}
    parent = by_id.get(span.parent.span_id) if span.parent else None
    return span.name, span.kind.name, parent, span.status.status_code.name


def test_trace_of_a_job_that_failed_once_then_succeeded(queue: Queue, telemetry: Telemetry) -> None:
    job = queue.enqueue("flaky", {"fail_times": 1}, queue="mail").job
    drain(queue, worker_id="w-1")
    spans = telemetry.finished()
    # outcomes are settled on the worker's notifier thread, so order only what is ordered
    assert sorted(describe(s, spans) for s in spans) == sorted(
        [
            ("send mail", "PRODUCER", None, "UNSET"),
            ("process mail", "CONSUMER", "send mail", "ERROR"),
            ("settle mail", "INTERNAL", "send mail", "UNSET"),
            ("process mail", "CONSUMER", "send mail", "UNSET"),
        ]
    )  # a completion has no settle span: one span per job in the common case
    assert len({s.context.trace_id for s in spans}) == 1

    def attempt(span: ReadableSpan) -> int:
        return int((span.attributes or {})["jobcore.job.attempt"])

    send = spans[0]
    first, second = sorted((s for s in spans if s.kind is SpanKind.CONSUMER), key=attempt)
    [retry] = [s for s in spans if s.name.startswith("settle")]
    assert (send.end_time or 0) <= (first.start_time or 0) and (first.end_time or 0) <= (
        second.start_time or 0
    )
    assert dict(send.attributes or {}) == {
        "messaging.system": "jobcore",
        "messaging.operation.type": "send",
        "messaging.operation.name": "enqueue",
        "messaging.destination.name": "mail",
        "messaging.message.id": job.id,
        "jobcore.job.type": "flaky",
    }
    assert first.attributes is not None and first.attributes["jobcore.job.attempt"] == 1
    assert (
        first.attributes["messaging.client.id"] == "w-1"
        and first.attributes["messaging.operation.type"] == "process"
    )
    assert first.events[0].name == "exception"
    assert (
        first.events[0].attributes is not None
        and first.events[0].attributes["exception.type"] == "ConnectionError"
    )
    assert first.status.description == "ConnectionError: flaky on attempt 1"
    assert retry.events[0].name == "jobcore.job.retrying"
    assert retry.events[0].attributes is not None
    assert retry.events[0].attributes["jobcore.error"] == "ConnectionError: flaky on attempt 1"
    assert second.attributes is not None and second.attributes["jobcore.job.attempt"] == 2
    assert retry.attributes is not None and retry.attributes["jobcore.job.outcome"] == "retrying"
    assert queue.get(job.id).meta["otel"]["traceparent"].startswith("00-")


def test_a_failing_sampler_or_processor_never_fails_a_job(
    jobcore_make_queue: MakeQueue, caplog: pytest.LogCaptureFixture
) -> None:
    """On the direct path (`JobSpan`) the job runs untraced and the failure is logged."""

    class Broken(SimpleSpanProcessor):
        def on_end(self, span: ReadableSpan) -> None:
            if span.name.startswith("process"):
                raise RuntimeError("processor broke")
            super().on_end(span)

    telemetry = Telemetry(direct=True)
    broken = Broken(telemetry.spans)
    telemetry.plugin = OtelPlugin(
        telemetry.tracer_provider, telemetry.meter_provider, span_processor=broken
    )
    queue = jobcore_make_queue(telemetry.plugin, tp)
    ended = queue.enqueue("noop", {}).job
    drain(queue)
    assert queue.get(ended.id).status == "completed"
    assert f"job {ended.id}: its process span could not be ended" in caplog.text

    class RaisingSampler(ParentBasedTraceIdRatio):
        def should_sample(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("sampler broke")

    assert telemetry.plugin._spans is not None
    telemetry.plugin._spans.sampler = RaisingSampler(1.0)
    started = queue.enqueue("noop", {}).job
    drain(queue)
    assert queue.get(started.id).status == "completed"
    assert f"job {started.id}: its process span could not be started" in caplog.text


def test_final_failure_has_error_status(queue: Queue, telemetry: Telemetry) -> None:
    queue.enqueue("fail", {"how": "permanent", "message": "bad input"})
    drain(queue)
    process, settle = telemetry.finished()[1:]
    assert process.status.status_code is StatusCode.ERROR
    assert (
        settle.events[0].name == "jobcore.job.failed"
        and settle.status.status_code is StatusCode.ERROR
    )


def test_child_jobs_join_the_parent_trace(queue: Queue, telemetry: Telemetry) -> None:
    parent = queue.enqueue("parent", {"children": 1}).job
    drain(queue)
    spans = telemetry.finished()
    assert len({s.context.trace_id for s in spans}) == 1
    sends = [s for s in spans if s.kind is SpanKind.PRODUCER]
    assert len(sends) == 2
    parent_process = next(
        s
        for s in spans
        if s.kind is SpanKind.CONSUMER
        and s.attributes
        and s.attributes["messaging.message.id"] == parent.id
    )
    child_send = next(
        s for s in sends if s.attributes and s.attributes.get("jobcore.job.parent_id") == parent.id
    )
    assert (
        child_send.parent is not None
        and child_send.parent.span_id == parent_process.context.span_id
    )
    child_process = next(
        s for s in spans if s.kind is SpanKind.CONSUMER and s is not parent_process
    )
    assert (
        child_process.parent is not None
        and child_process.parent.span_id == child_send.context.span_id
    )


def test_enqueue_inside_an_application_span(queue: Queue, telemetry: Telemetry) -> None:
    tracer = telemetry.tracer_provider.get_tracer("app")
    with tracer.start_as_current_span("POST /orders") as app_span:
        queue.enqueue("noop", {})
    send = next(s for s in telemetry.finished() if s.kind is SpanKind.PRODUCER)
    assert send.parent is not None and send.parent.span_id == app_span.get_span_context().span_id


def test_reclaim_and_cancel_events(queue: Queue, telemetry: Telemetry) -> None:
    queue.enqueue("noop", {})
    past = SQLiteStorage(queue.url, clock=lambda: 0)  # a claim made long ago
    past.claim(worker="dead", limit=1, lease_ms=1)
    past.close()
    queue.sweep()
    waiting = queue.enqueue("noop", {}, delay=60).job
    queue.cancel([waiting.id])
    events = [s.events[0].name for s in telemetry.finished() if s.name.startswith("settle")]
    assert events == ["jobcore.job.reclaimed", "jobcore.job.cancelled"]


def test_metrics(queue: Queue, telemetry: Telemetry) -> None:
    queue.enqueue("flaky", {"fail_times": 1})
    queue.enqueue("noop", {"sleep": 0.02})
    queue.enqueue("fail", {"how": "permanent"})
    queue.enqueue("noop", {}, delay=600)
    drain(queue)
    metrics = telemetry.metrics()

    def total(name: str, job_type: str | None = None) -> int:
        return sum(
            p.value
            for p in metrics.get(name, [])
            if job_type is None or p.attributes["jobcore.job.type"] == job_type
        )

    assert total("jobcore.jobs.enqueued") == 4
    assert (total("jobcore.jobs.completed", "noop"), total("jobcore.jobs.completed", "flaky")) == (
        1,
        1,
    )
    assert total("jobcore.jobs.retried", "flaky") == 1 and total("jobcore.jobs.failed", "fail") == 1
    durations = {p.attributes["jobcore.job.type"]: p for p in metrics["jobcore.job.duration"]}
    assert durations["noop"].count == 1 and durations["noop"].sum >= 20
    assert sum(p.count for p in metrics["jobcore.job.queue_wait"]) == 4  # four attempts claimed
    depth = {p.attributes["jobcore.job.status"]: p.value for p in metrics["jobcore.queue.depth"]}
    assert depth == {"completed": 2, "failed": 1, "scheduled": 1}


def test_counts_from_many_threads_are_each_counted_once_across_folds(
    queue: Queue, telemetry: Telemetry
) -> None:
    """Counts are queued and added up every `FOLD_AT` and when the SDK reads them: from
    several threads, with reads racing the folds, none is lost or counted twice."""
    plugin = telemetry.plugin
    jobs = [queue.enqueue("noop", {}).job, queue.enqueue("flaky", {"fail_times": 0}).job]
    per_thread = FOLD_AT * 2 + 3
    start = threading.Barrier(3)
    read: list[int] = []

    def completed(n: int) -> None:
        job = jobs[n % 2]
        start.wait()
        for i in range(per_thread):
            plugin.jobcore_job_completed(job=job, duration_ms=1.0)
            if n == 0 and i % 700 == 0:
                read.append(len(telemetry.metrics()))  # a collection racing the folds

    threads = [threading.Thread(target=completed, args=(n,)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    counted = {
        p.attributes["jobcore.job.type"]: p.value
        for p in telemetry.metrics()["jobcore.jobs.completed"]
    }
    assert counted == {"noop": 2 * per_thread, "flaky": per_thread}
    assert read  # the reads ran while the threads counted


PER_JOB_HOOKS = {
    "jobcore_enqueue_meta",
    "jobcore_execute_job",
    "jobcore_job_enqueued",
    "jobcore_job_claimed",
    "jobcore_job_completed",
    "jobcore_job_retrying",
    "jobcore_job_failed",
    "jobcore_job_reclaimed",
    "jobcore_job_cancelled",
}


def clear_otel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)


def test_no_exporter_registers_no_hooks(
    monkeypatch: pytest.MonkeyPatch, jobcore_make_queue: MakeQueue
) -> None:
    clear_otel_env(monkeypatch)
    pm = make_plugin_manager()  # the installed entry point, as the CLI loads it
    assert isinstance(pm.get_plugin("otel"), InertOtel)
    assert pm.hooks_of("otel") == []
    for hook_name in PER_JOB_HOOKS:
        impls = getattr(pm.hook, hook_name).get_hookimpls()
        assert "otel" not in {impl.plugin_name for impl in impls}
    queue = jobcore_make_queue(pm.get_plugin("otel"), tp)
    assert "otel" not in queue.enqueue("noop", {}).job.meta


def test_an_exporter_registers_the_per_job_hooks(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_otel_env(monkeypatch)
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    pm = make_plugin_manager()
    assert isinstance(pm.get_plugin("otel"), OtelPlugin)
    assert set(pm.hooks_of("otel")) >= PER_JOB_HOOKS
    again = make_plugin_manager()
    assert again.get_plugin("otel") is pm.get_plugin("otel")  # one set of providers per setting


def test_a_bad_setting_fails_configure_naming_it(
    monkeypatch: pytest.MonkeyPatch, jobcore_make_queue: MakeQueue
) -> None:
    clear_otel_env(monkeypatch)
    plugin = load_plugin({"OTEL_TRACES_EXPORTER": "zipkin"})
    assert isinstance(plugin, MisconfiguredOtel)
    with pytest.raises(ConfigError, match="OTEL_TRACES_EXPORTER: zipkin"):
        jobcore_make_queue(plugin)
    bad_protocol = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
    }
    assert isinstance(load_plugin(bad_protocol), MisconfiguredOtel)
    assert isinstance(load_plugin({"OTEL_METRIC_EXPORT_INTERVAL": "soon"}), MisconfiguredOtel)


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    server = OtlpReceiver()
    yield server
    server.close()


def test_otlp_http_export_end_to_end(receiver: OtlpReceiver, tmp_path: Path) -> None:
    env = subprocess_env(
        JOBCORE_DB=str(tmp_path / "otel.db"),
        OTEL_SERVICE_NAME="jobcore-e2e",
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
        OTEL_METRIC_EXPORT_INTERVAL="200",
        JOBCORE_BACKOFF_BASE="0",
    )

    def jobcore(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "jobcore", *args],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )

    enqueued = jobcore("enqueue", "flaky", json.dumps({"fail_times": 1}))
    assert enqueued.returncode == 0, enqueued.stderr
    job_id = enqueued.stdout.strip()
    ran = jobcore("run", "--until-empty", "--worker-id", "w-e2e")
    assert ran.returncode == 0, ran.stderr
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(receiver.spans) < 4:
        time.sleep(0.05)
    names = sorted(span["name"] for span in receiver.spans)
    assert names == ["process default", "process default", "send default", "settle default"]
    assert {span["trace"] for span in receiver.spans} and len(
        {span["trace"] for span in receiver.spans}
    ) == 1
    assert {span["service"] for span in receiver.spans} == {"jobcore-e2e"}
    assert all(span["attributes"]["messaging.message.id"] == job_id for span in receiver.spans)
    [send] = [span for span in receiver.spans if span["name"] == "send default"]
    first, second = sorted(
        (span for span in receiver.spans if span["name"] == "process default"),
        key=lambda span: span["attributes"]["jobcore.job.attempt"],
    )
    assert first["parent"] == second["parent"] == send["id"]  # the process spans' parent
    assert (first["status"], first["events"]) == (2, ["exception"])  # STATUS_CODE_ERROR
    assert (second["status"], second["events"]) == (0, [])
    assert first["kind"] == 5 and first["attributes"] == {  # SPAN_KIND_CONSUMER
        "messaging.system": "jobcore",
        "messaging.operation.type": "process",
        "messaging.destination.name": "default",
        "messaging.message.id": job_id,
        "jobcore.job.type": "flaky",
        "messaging.operation.name": "process",
        "messaging.client.id": "w-e2e",
        "jobcore.job.attempt": 1,
    }
    assert {
        "jobcore.jobs.completed",
        "jobcore.job.duration",
        "jobcore.queue.depth",
    } <= receiver.metric_names
    # two attempts claimed, one completed (the last export, at exit, holds the totals)
    assert receiver.histograms["jobcore.job.queue_wait"]["flaky"][0] == 2
    assert receiver.histograms["jobcore.job.duration"]["flaky"][0] == 1


def test_the_loaded_plugin_exports_to_its_endpoint(
    receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch, jobcore_make_queue: MakeQueue
) -> None:
    """The endpoint comes from the environment the plugin was loaded with."""
    clear_otel_env(monkeypatch)
    plugin = load_plugin(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_SERVICE_NAME": "in-process"}
    )
    assert isinstance(plugin, OtelPlugin)
    queue = jobcore_make_queue(plugin, tp)
    job = queue.enqueue("noop", {}, queue="bulk").job
    drain(queue)  # the worker flushes the providers when it stops
    names = sorted(span["name"] for span in receiver.spans)
    assert names == ["process bulk", "send bulk"]
    assert {span["attributes"]["messaging.message.id"] for span in receiver.spans} == {job.id}
    assert {span["service"] for span in receiver.spans} == {"in-process"}
    plugin.meter_provider.shutdown()  # its last export, while the receiver still listens
    plugin.tracer_provider.shutdown()
    assert isinstance(plugin.duration, JobHistogram)  # aggregated by the plugin for OTLP
    assert receiver.histograms["jobcore.job.duration"]["noop"][0] == 1
    assert receiver.histograms["jobcore.job.queue_wait"]["noop"][0] == 1


def test_the_exporters_compress_as_the_environment_asks(
    receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch, jobcore_make_queue: MakeQueue
) -> None:
    """The direct encoder's requests go through the SDK exporter's settings (gzip here)."""
    clear_otel_env(monkeypatch)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
    plugin = OtelPlugin(env={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint})
    queue = jobcore_make_queue(plugin, tp)
    job = queue.enqueue("noop", {}, queue="zipped").job
    drain(queue)
    plugin.meter_provider.shutdown()
    plugin.tracer_provider.shutdown()
    assert sorted(span["name"] for span in receiver.spans) == ["process zipped", "send zipped"]
    assert {span["attributes"]["messaging.message.id"] for span in receiver.spans} == {job.id}
    assert receiver.encodings == {("/v1/traces", "gzip"), ("/v1/metrics", "gzip")}
    assert plugin._spans is not None and isinstance(plugin.duration, JobHistogram)  # direct path
    assert receiver.histograms["jobcore.job.duration"]["noop"][0] == 1


def test_a_sampled_out_job_makes_no_process_span_but_passes_its_trace_on(
    jobcore_make_queue: MakeQueue,
) -> None:
    spans = InMemorySpanExporter()
    provider = TracerProvider(sampler=ParentBasedTraceIdRatio(0.0))  # keep no trace
    provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    plugin = OtelPlugin(provider, MeterProvider(metric_readers=[reader]))
    queue = jobcore_make_queue(plugin, tp)
    started: list[str] = []
    tracer = plugin.tracer

    class CountingTracer:
        def start_as_current_span(self, name: str, **options: Any) -> Any:
            started.append(name)
            return tracer.start_as_current_span(name, **options)

    plugin.tracer = CountingTracer()  # type: ignore[assignment]
    parent = queue.enqueue("parent", {"children": 1}).job
    flags = int(parent.meta["otel"]["traceparent"].rsplit("-", 1)[1], 16)
    assert flags & 1 == 0  # not sampled, decided at enqueue
    drain(queue)
    assert spans.get_finished_spans() == ()
    assert sorted(started) == ["send default", "send default"]  # no process span even begun
    [child] = [job for job in queue.list_jobs() if job.parent_id == parent.id]
    trace_of = {job.id: job.meta["otel"]["traceparent"].split("-")[1] for job in (parent, child)}
    assert trace_of[child.id] == trace_of[parent.id]  # the child joined the parent's trace
    data = reader.get_metrics_data()
    counted = [
        point.value
        for resource in (data.resource_metrics if data else [])
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "jobcore.jobs.completed"
        for point in metric.data.data_points
    ]
    assert sum(counted) == 2  # metrics still count every job


def test_a_malformed_trace_context_never_fails_a_job_on_a_traced_worker(
    receiver: OtlpReceiver, tmp_path: Path, jobcore_make_queue: MakeQueue
) -> None:
    """Issue 22 item 15: `meta.otel` comes from the producer; a bad one is ignored and logged."""
    db = tmp_path / "otel.db"
    untraced = jobcore_make_queue(tp, db=str(db))  # a producer without the otel plugin
    job_id = untraced.enqueue("flaky", {"fail_times": 0}, meta={"otel": "not-a-context"}).job.id
    env = subprocess_env(
        JOBCORE_DB=str(db),
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
        OTEL_METRICS_EXPORTER="none",
    )
    ran = subprocess.run(
        [sys.executable, "-m", "jobcore", "run", "--until-empty"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    job = untraced.get(job_id)
    assert (job.status, job.attempts, job.errors) == ("completed", 1, [])
    assert f"job {job_id}: ignoring its meta.otel trace context" in ran.stderr
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not receiver.spans:
        time.sleep(0.05)
    [span] = receiver.spans
    assert span["name"] == "process default" and span["parent"] == ""  # a fresh root


def test_limit_metrics(queue: Queue, telemetry: Telemetry) -> None:
    operating.set_limit(queue, "queue", "mail", 3)
    queue.enqueue("noop", {}, queue="mail")
    drain(queue)  # the worker's start gives the plugin the queue
    metrics = telemetry.metrics()
    caps = {
        p.attributes["jobcore.limit.name"]: p.value for p in metrics["jobcore.limit.concurrency"]
    }
    held = {p.attributes["jobcore.limit.name"]: p.value for p in metrics["jobcore.limit.held"]}
    assert caps == {"mail": 3} and held == {"mail": 0}


def test_schedule_metrics(
    jobcore_make_queue: MakeQueue,
    telemetry: Telemetry,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the cron plugin: per schedule, overdue (0/1), lag (s) and runs, from the store."""
    import jobcore_cron

    schedules = {
        "hourly": {"type": "noop", "every": "1h"},
        "often": {"type": "noop", "every": "2h"},
    }
    db = tmp_path / "cron-otel.db"
    queue = jobcore_make_queue(
        telemetry.plugin,
        tp,
        jobcore_cron,
        db=str(db),
        plugin_settings={"cron": {"schedules": schedules}},
    )
    drain(queue)  # the worker's start gives the plugin the queue; its scheduler records both

    def by_name(metrics: dict[str, list[Any]], name: str) -> dict[str, Any]:
        return {p.attributes["jobcore.schedule.name"]: p.value for p in metrics[name]}

    metrics = telemetry.metrics()
    assert by_name(metrics, "jobcore.schedule.overdue") == {"hourly": 0, "often": 0}
    assert by_name(metrics, "jobcore.schedule.lag") == {"hourly": 0.0, "often": 0.0}
    assert by_name(metrics, "jobcore.schedule.runs") == {"hourly": 0, "often": 0}
    # every scheduler down for three hours: "hourly" was dealt with up to then only
    with queue.transaction() as conn:
        conn.execute(
            "UPDATE cron_schedules SET last_at = last_at - 3 * 3600 * 1000, runs = 2 "
            "WHERE name = 'hourly'"
        )
    monkeypatch.setattr("jobcore_otel.schedules.FRESH", 0.0)  # no read shared from before
    metrics = telemetry.metrics()
    assert by_name(metrics, "jobcore.schedule.overdue") == {"hourly": 1, "often": 0}
    lag = by_name(metrics, "jobcore.schedule.lag")
    assert lag["often"] == 0.0 and 3600 < lag["hourly"] < 3 * 3600
    assert by_name(metrics, "jobcore.schedule.runs") == {"hourly": 2, "often": 0}


def test_no_schedule_metrics_without_the_cron_plugin(queue: Queue, telemetry: Telemetry) -> None:
    drain(queue)
    assert "jobcore.schedule.overdue" not in telemetry.metrics()


def test_rate_limit_metrics(queue: Queue, telemetry: Telemetry) -> None:
    operating.set_limit(queue, "queue", "mail", 3)
    operating.set_rate(queue, "queue", "api", 50, 60)
    queue.enqueue("noop", {}, queue="api")
    drain(queue)  # the worker's start gives the plugin the queue
    metrics = telemetry.metrics()

    def gauge(name: str) -> dict[str, float]:
        return {p.attributes["jobcore.limit.name"]: p.value for p in metrics[name]}

    assert gauge("jobcore.limit.rate") == {"api": 50}
    assert gauge("jobcore.limit.rate.period") == {"api": 60}
    assert gauge("jobcore.limit.rate.used") == {"api": 1}
    assert gauge("jobcore.limit.concurrency") == {"mail": 3}  # rate rows are not in it
