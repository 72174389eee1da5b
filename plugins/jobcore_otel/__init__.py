"""jobcore plugin `otel`: OpenTelemetry traces and metrics for the job lifecycle.

Tracing follows the messaging semantic conventions: a PRODUCER span
(`send <queue>`) at enqueue whose W3C context is stored in the job's
`meta["otel"]`; a CONSUMER span (`process <queue>`) per attempt parented on
it, current while the handler runs so child jobs join the trace; and a short
`settle <queue>` span per outcome other than completion carrying an event
(`jobcore.job.retrying`, `.failed`, `.reclaimed`, `.cancelled`). Completions,
the common case, get no span of their own: one span per job (the process
span) keeps an exporting worker's per-job work small; the completed counter
and duration histogram record them.

The entry point `jobcore_otel:plugin` is chosen from the `OTEL_*` environment
each time a plugin manager loads it: with no exporter configured it is an
object that implements no hook at all, so pluggy calls nothing per job; with
a bad setting it only raises that `ConfigError` from `jobcore_configure`;
otherwise it is one `OtelPlugin` per distinct configuration, shared.
"""

from __future__ import annotations

import asyncio
import atexit
import inspect
import logging
import os
import threading
from collections import deque
from collections.abc import Awaitable, Generator, Iterable, Mapping
from functools import partial
from typing import Any

from jobcore import Config, ConfigError, Job, JobContext, NewJob, Queue, hookimpl
from jobcore.concurrency import limit_rows
from jobcore.plugins import require

require("opentelemetry.sdk", extra="otel")

from opentelemetry import context as otel_context  # noqa: E402
from opentelemetry.context import Context  # noqa: E402
from opentelemetry.metrics import (  # noqa: E402
    CallbackOptions,
    Histogram,
    MeterProvider,
    Observation,
)
from opentelemetry.sdk.metrics import Meter as SdkMeter  # noqa: E402
from opentelemetry.sdk.trace import SpanProcessor  # noqa: E402
from opentelemetry.sdk.trace import Tracer as SdkTracer  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider  # noqa: E402
from opentelemetry.trace import (  # noqa: E402
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TracerProvider,
    get_current_span,
    set_span_in_context,
)

from jobcore_otel.carrier import (  # noqa: E402
    EMPTY_CONTEXT,
    PROPAGATOR,
    extract,
    lone_traceparent,
    remote_parent,
    sampled_either_way,
)
from jobcore_otel.histograms import FOLD_AT, JobHistogram, OtlpMetricExporter  # noqa: E402
from jobcore_otel.job_span import JobSpan, JobSpanFactory  # noqa: E402
from jobcore_otel.schedules import ScheduleGauges  # noqa: E402

__all__ = ["InertOtel", "MisconfiguredOtel", "OtelPlugin", "load_plugin"]

SYSTEM = "jobcore"
COUNTERS = ("enqueued", "completed", "failed", "retried", "reclaimed", "cancelled")
log = logging.getLogger("jobcore.otel")
_PLAIN_RESULTS = frozenset({type(None), dict, list, str, int, float, bool})


def _awaitable(result: Any) -> bool:
    """`inspect.isawaitable`, answered at once for the usual results of a sync handler."""
    return type(result) not in _PLAIN_RESULTS and inspect.isawaitable(result)


def _parent_context(job: Job, level: int) -> tuple[Context, bool]:
    """The trace context stored in `meta["otel"]`, and whether one was there.

    `meta` comes from whoever enqueued the job: anything but an object of
    strings, or a context the propagator cannot read, is ignored (logged at
    `level` with the job id) and the job's spans start a fresh trace (a new root). Tracing
    never decides a job's outcome.
    """
    carrier = job.meta.get("otel") if isinstance(job.meta, dict) else None
    if carrier is None:
        return otel_context.get_current(), False
    if isinstance(carrier, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in carrier.items()
    ):
        try:
            return extract(carrier), True
        except Exception as exc:  # a propagator that trips on odd input: same as bad input
            problem = f"{type(exc).__name__}: {exc}"
    else:
        problem = "not an object of strings"
    log.log(
        level,
        "job %s: ignoring its meta.otel trace context (%s): %.200r; tracing it as a new trace",
        job.id,
        problem,
        carrier,
    )
    return Context(), False


def _process_attributes(job: Job, worker: str) -> dict[str, Any]:
    """The process span's attributes (`_job_attributes` of "process", then three more)."""
    return {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "process",
        "messaging.destination.name": job.queue,
        "messaging.message.id": job.id,
        "jobcore.job.type": job.type,
        "messaging.operation.name": "process",
        "messaging.client.id": worker,
        "jobcore.job.attempt": job.attempts,
    }


def _job_attributes(job: Job | NewJob, operation: str) -> dict[str, Any]:
    return {
        "messaging.system": SYSTEM,
        "messaging.operation.type": operation,
        "messaging.destination.name": job.queue,
        "messaging.message.id": job.id,
        "jobcore.job.type": job.type,
    }


def _record_error(span: Span, exc: BaseException, job_id: str) -> None:
    try:
        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
    except Exception:  # e.g. an exception whose str() raises: the job's own error wins
        log.debug("job %s: its exception could not be put on the span", job_id)


def _running_task() -> asyncio.Task[Any] | None:
    """The task running now, None outside a running event loop."""
    try:
        return asyncio.current_task()
    except RuntimeError:
        return None


async def _awaited_in(
    awaitable: Awaitable[Any], current: Context, span: Span | None, job_id: str
) -> Any:
    """Await an async handler's coroutine with `current` as the trace context of its task,
    then end `span` (if any) with its outcome: the span covers the awaited handler, its
    exception (CancelledError included) and its status."""
    token = otel_context.attach(current)
    task = asyncio.current_task()
    closed = False
    try:
        result = await awaitable
    except BaseException as exc:
        # a close() may come from outside the task's context (a GeneratorExit, or the
        # RuntimeError of a handler that awaited while closed): nothing there to undo
        closed = isinstance(exc, GeneratorExit) or _running_task() is not task
        if span is not None:
            _record_error(span, exc, job_id)
        raise
    finally:
        if not closed:
            otel_context.detach(token)
        if span is not None:
            _end(span, job_id)
    return result


class _Traced:
    """An async handler's awaitable under its trace context and process span (or none: sampled
    out), the wrapper's result: awaiting it runs `_awaited_in`, which ends the span with the
    awaited outcome. Closed without ever being awaited (jobcore does that when the handler's
    task was cancelled before its first step: a shutdown), it ends the span as cancelled and
    closes the handler's coroutine; so each begun attempt's span ends once (DESIGN §15)."""

    __slots__ = ("_awaited", "_handler", "_job_id", "_span")

    def __init__(
        self, handler: Awaitable[Any], current: Context, span: Span | None, job_id: str
    ) -> None:
        self._handler = handler
        self._span = span
        self._job_id = job_id
        self._awaited = _awaited_in(handler, current, span, job_id)

    def __await__(self) -> Generator[Any, None, Any]:
        return self._awaited.__await__()

    def close(self) -> None:
        """As a coroutine's `close()`; never awaited: the span ends with a CancelledError."""
        unbegun = inspect.getcoroutinestate(self._awaited) == inspect.CORO_CREATED
        self._awaited.close()
        if not unbegun:
            return  # `_awaited_in` ended the span (or, suspended, ends it at this close)
        try:
            close = getattr(self._handler, "close", None)
            if callable(close):
                close()  # no "coroutine was never awaited" warning
        finally:
            if self._span is not None:
                cancelled = asyncio.CancelledError("cancelled before the handler began")
                _record_error(self._span, cancelled, self._job_id)
                _end(self._span, self._job_id)


def _end(span: Span, job_id: str) -> None:
    try:
        span.end()
    except Exception:  # the job's outcome stands whatever the span processor does
        log.exception("job %s: its process span could not be ended", job_id)


class OtelPlugin:
    """Spans and metrics for every job; providers built from `OTEL_*` on first configure unless given."""

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        env: Mapping[str, str] | None = None,
        span_processor: SpanProcessor | None = None,
    ) -> None:
        """`span_processor`: `tracer_provider`'s only span processor, to be handed the process
        spans directly (`job_span`); the providers built from `OTEL_*` with the OTLP exporter
        do that by themselves."""
        self._given = (tracer_provider, meter_provider)
        self._direct = span_processor
        self._env = env
        self._ready = False
        self._queue: Queue | None = None
        self._spans: JobSpanFactory | None = None
        self._metric_exporter: OtlpMetricExporter | None = None

    def _setup(self) -> None:
        if self._ready:
            return
        tracer_provider, meter_provider = self._given
        if tracer_provider is None or meter_provider is None:
            from jobcore_otel.providers import providers_from_env

            built_tp, built_mp, direct, metric_exporter = providers_from_env(self._env)
            if tracer_provider is None:
                self._direct = direct
            if meter_provider is None:
                self._metric_exporter = metric_exporter
            tracer_provider = tracer_provider or built_tp
            meter_provider = meter_provider or built_mp
            atexit.register(built_tp.shutdown)  # flush batched spans and metrics at exit
            atexit.register(built_mp.shutdown)
        self.tracer_provider, self.meter_provider = tracer_provider, meter_provider
        self.tracer = tracer_provider.get_tracer("jobcore")
        if (
            self._direct is not None
            and isinstance(tracer_provider, SdkTracerProvider)
            and isinstance(self.tracer, SdkTracer)  # not a no-op one (OTEL_SDK_DISABLED)
        ):
            self._spans = JobSpanFactory(tracer_provider, self._direct, "jobcore")
        meter = meter_provider.get_meter("jobcore")
        # Counted in plain dicts on the hot path; the SDK reads the totals when it collects.
        self._totals: dict[str, dict[tuple[str, str], int]] = {}
        self._counted: deque[tuple[str, str, str]] = deque()  # (counter, job type, queue)
        self._totals_lock = threading.Lock()
        for name in COUNTERS:
            self._totals[name] = {}
            meter.create_observable_counter(
                f"jobcore.jobs.{name}",
                callbacks=[partial(self._observe_total, name)],
                unit="{job}",
                description=f"jobs {name}",
            )
        histograms = (
            ("jobcore.job.duration", "ms", "run time of completed attempts"),
            ("jobcore.job.queue_wait", "ms", "from due (enqueue or run_at) to claim"),
        )
        self.duration: Histogram | JobHistogram
        self.queue_wait: Histogram | JobHistogram
        if self._metric_exporter is not None and isinstance(meter, SdkMeter):  # not disabled
            # aggregated here for the exporter (`histograms`)
            own = tuple(JobHistogram(*histogram) for histogram in histograms)
            self._metric_exporter.histograms = own
            self.duration, self.queue_wait = own
        else:
            self.duration, self.queue_wait = (
                meter.create_histogram(name, unit=unit, description=description)
                for name, unit, description in histograms
            )
        meter.create_observable_gauge(
            "jobcore.queue.depth",
            callbacks=[self._observe_depth],
            unit="{job}",
            description="jobs by status",
        )
        meter.create_observable_gauge(
            "jobcore.limit.held",
            callbacks=[partial(self._observe_limits, "held")],
            unit="{job}",
            description="jobs claimed under each concurrency limit (key limits: keys full)",
        )
        meter.create_observable_gauge(
            "jobcore.limit.concurrency",
            callbacks=[partial(self._observe_limits, "concurrency")],
            unit="{job}",
            description="each concurrency limit (DESIGN §16)",
        )
        meter.create_observable_gauge(
            "jobcore.limit.rate",
            callbacks=[partial(self._observe_limits, "rate")],
            unit="{job}",
            description="each rate limit: jobs it lets start per period (DESIGN §16)",
        )
        meter.create_observable_gauge(
            "jobcore.limit.rate.period",
            callbacks=[partial(self._observe_limits, "period")],
            unit="s",
            description="each rate limit's period",
        )
        meter.create_observable_gauge(
            "jobcore.limit.rate.used",
            callbacks=[partial(self._observe_limits, "used")],
            unit="{job}",
            description="jobs started in each rate limit's current window (key limits: keys full)",
        )
        ScheduleGauges(lambda: self._queue).register(meter)  # with the cron plugin
        self._ready = True

    def _observe_limits(self, field: str, options: CallbackOptions) -> Iterable[Observation]:
        if self._queue is None:
            return []
        return [
            Observation(
                row[field], {"jobcore.limit.scope": row["scope"], "jobcore.limit.name": row["name"]}
            )
            for row in limit_rows(self._queue.storage)
            if row[field] is not None  # concurrency rows have no rate, rate rows no held
        ]

    def _observe_depth(self, options: CallbackOptions) -> Iterable[Observation]:
        if self._queue is None:
            return []
        counts = self._queue.storage.count_by_status()
        return [
            Observation(count, {"jobcore.job.status": status})
            for status, count in sorted(counts.items())
        ]

    def _count(self, name: str, job: Job) -> None:
        """Queue one count (any thread); they are added up every `FOLD_AT` and when read."""
        counted = self._counted
        counted.append((name, job.type, job.queue))
        if len(counted) >= FOLD_AT:
            self._add_counted()

    def _add_counted(self) -> None:
        with self._totals_lock:
            take = self._counted.popleft
            totals = self._totals
            while True:
                try:
                    name, job_type, queue = take()
                except IndexError:
                    return
                by_key = totals[name]
                key = (job_type, queue)
                by_key[key] = by_key.get(key, 0) + 1

    def _observe_total(self, name: str, options: CallbackOptions) -> Iterable[Observation]:
        self._add_counted()
        with self._totals_lock:
            totals = sorted(self._totals[name].items())
        return [
            Observation(count, {"jobcore.job.type": job_type, "messaging.destination.name": queue})
            for (job_type, queue), count in totals
        ]

    # -- hooks -------------------------------------------------------------------

    @hookimpl
    def jobcore_configure(self, config: Config) -> None:
        self._setup()

    @hookimpl
    def jobcore_worker_started(self, worker: str, queue: Queue) -> None:
        self._queue = queue

    @hookimpl
    def jobcore_worker_stopped(self, worker: str) -> None:
        for provider in (self.tracer_provider, self.meter_provider):
            flush = getattr(provider, "force_flush", None)  # the SDK's providers have it
            if flush is not None:
                flush()

    @hookimpl
    def jobcore_enqueue_meta(self, job: NewJob) -> dict[str, Any] | None:
        self._setup()
        attributes = {**_job_attributes(job, "send"), "messaging.operation.name": "enqueue"}
        if job.parent_id:
            attributes["jobcore.job.parent_id"] = job.parent_id
        with self.tracer.start_as_current_span(
            f"send {job.queue}", kind=SpanKind.PRODUCER, attributes=attributes
        ):
            carrier: dict[str, str] = {}
            PROPAGATOR.inject(carrier)
        return {"otel": carrier}

    @hookimpl(wrapper=True)
    def jobcore_execute_job(self, job: Job, ctx: JobContext) -> Generator[None, Any, Any]:
        if self._spans is not None:
            return (yield from self._process_directly(job, ctx.worker))
        # Warned about on the first attempt only; later attempts and outcomes log it at debug.
        level = logging.WARNING if job.attempts <= 1 else logging.DEBUG
        parent, carried = _parent_context(job, level)
        attributes = _process_attributes(job, ctx.worker)
        if carried and not self._would_record(parent, f"process {job.queue}", attributes):
            # Sampled out (e.g. at enqueue): skip building a span nobody records, but keep
            # the trace context current so child jobs carry it on.
            token = otel_context.attach(parent)
            try:
                result = yield
            finally:
                otel_context.detach(token)
            if _awaitable(result):  # an async handler: current in its task too
                return _Traced(result, parent, None, job.id)
            return result
        span = self.tracer.start_span(
            f"process {job.queue}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        )
        current = set_span_in_context(span, parent)
        token = otel_context.attach(current)
        try:
            result = yield
        except BaseException as exc:
            _record_error(span, exc, job.id)
            span.end()
            raise
        finally:
            otel_context.detach(token)
        if _awaitable(result):
            # An async handler: the hook returned its coroutine, which the worker awaits
            # later on its loop. The span stays open until that ends (DESIGN §15).
            return _Traced(result, current, span, job.id)
        span.end()
        return result

    def _process_directly(self, job: Job, worker: str) -> Generator[None, Any, Any]:
        """`jobcore_execute_job` with a `JobSpan` (the same span, for less work).

        The carrier the plugin writes is read without a `Context`; under the default sampler
        a parent that is sampled or unreadable either way is not even read until the span's
        context is needed (`JobSpanFactory.start_carried`), mostly on the exporter's thread.
        """
        spans = self._spans
        assert spans is not None
        name = f"process {job.queue}"
        attributes = _process_attributes(job, worker)
        traceparent = lone_traceparent(job.meta)
        parent: Context | None = None  # only a sampler other than the default needs it
        remote: SpanContext | None = None
        span: JobSpan | NonRecordingSpan | None = None
        try:
            if traceparent is not None and spans.lazy and sampled_either_way(traceparent):
                span = spans.start_carried(name, SpanKind.CONSUMER, attributes, traceparent)
            else:
                remote = None if traceparent is None else remote_parent(traceparent)
                if remote is None:
                    level = logging.WARNING if job.attempts <= 1 else logging.DEBUG
                    parent, _ = _parent_context(job, level)
                span = spans.start(name, parent, SpanKind.CONSUMER, attributes, remote)
        except Exception:  # e.g. a sampler that raises: the job runs untraced, never fails for it
            log.exception("job %s: its process span could not be started", job.id)
        # Sampled out: a non-recording span, current so child jobs carry its (unsampled) trace on.
        if span is None:
            if parent is None:
                parent = _parent_context(job, logging.DEBUG)[0]
            current = parent
        else:
            current = set_span_in_context(span, EMPTY_CONTEXT if parent is None else parent)
        token = otel_context.attach(current)
        try:
            result = yield
        except BaseException as exc:
            if span is not None:
                _record_error(span, exc, job.id)
                _end(span, job.id)
            raise
        finally:
            otel_context.detach(token)
        if _awaitable(result):  # an async handler: the span ends once it is awaited
            return _Traced(result, current, span, job.id)
        if span is not None:
            _end(span, job.id)
        return result

    def _would_record(self, parent: Context, name: str, attributes: dict[str, Any]) -> bool:
        """What the provider's sampler decides for a consumer span under `parent`."""
        sampler = getattr(self.tracer_provider, "sampler", None)  # the SDK provider has one
        parent_span = get_current_span(parent).get_span_context()
        if sampler is None or not parent_span.is_valid:
            return True
        result = sampler.should_sample(
            parent, parent_span.trace_id, name, SpanKind.CONSUMER, attributes
        )
        return bool(result.decision.is_recording())

    def _settle(self, job: Job, outcome: str, **details: Any) -> None:
        parent, _ = _parent_context(job, logging.DEBUG)
        attributes = {
            **_job_attributes(job, "settle"),
            "jobcore.job.outcome": outcome,
            "jobcore.job.attempt": job.attempts,
        }
        with self.tracer.start_as_current_span(
            f"settle {job.queue}", context=parent, kind=SpanKind.INTERNAL, attributes=attributes
        ) as span:
            event = {
                "jobcore.job.attempt": job.attempts,
                **{f"jobcore.{k}": v for k, v in details.items() if v is not None},
            }
            span.add_event(f"jobcore.job.{outcome}", event)
            if outcome == "failed":
                span.set_status(Status(StatusCode.ERROR, str(details.get("error", ""))))

    @hookimpl
    def jobcore_job_enqueued(self, job: Job) -> None:
        self._count("enqueued", job)

    @hookimpl
    def jobcore_job_claimed(self, job: Job, worker: str) -> None:
        if job.claimed_at is not None:
            self.queue_wait.record(
                max(0, job.claimed_at - job.run_at), {"jobcore.job.type": job.type}
            )

    @hookimpl
    def jobcore_job_completed(self, job: Job, duration_ms: float) -> None:
        # No settle span for the common case: the process span and this counter say it.
        self._count("completed", job)
        self.duration.record(duration_ms, {"jobcore.job.type": job.type})

    @hookimpl
    def jobcore_job_retrying(self, job: Job, error: str) -> None:
        self._count("retried", job)
        self._settle(job, "retrying", error=error, next_run_at=job.run_at)

    @hookimpl
    def jobcore_job_failed(self, job: Job, error: str) -> None:
        self._count("failed", job)
        self._settle(job, "failed", error=error)

    @hookimpl
    def jobcore_job_reclaimed(self, job: Job, error: str) -> None:
        self._count("reclaimed", job)
        self._settle(job, "reclaimed", error=error)

    @hookimpl
    def jobcore_job_cancelled(self, job: Job) -> None:
        self._count("cancelled", job)
        self._settle(job, "cancelled")


class InertOtel:
    """The plugin when no exporter is configured: it implements no hook, so it costs nothing."""


class MisconfiguredOtel:
    """The plugin when an `OTEL_*` setting is bad: configuring jobcore fails naming it."""

    def __init__(self, error: ConfigError) -> None:
        self.error = error

    @hookimpl
    def jobcore_configure(self, config: Config) -> None:
        raise self.error


_shared: dict[tuple[tuple[str, str], ...], OtelPlugin] = {}
_shared_lock = threading.Lock()


def load_plugin(env: Mapping[str, str] | None = None) -> OtelPlugin | InertOtel | MisconfiguredOtel:
    """The plugin object for `env` (default `os.environ`): inert, misconfigured or exporting."""
    from jobcore_otel.providers import configured_exporters

    env = os.environ if env is None else env
    try:
        if not configured_exporters(env):
            return InertOtel()
    except ConfigError as exc:
        return MisconfiguredOtel(exc)
    key = tuple(sorted((k, v) for k, v in env.items() if k.startswith("OTEL_")))
    with _shared_lock:
        if key not in _shared:
            _shared[key] = OtelPlugin(env=dict(env))
        return _shared[key]


def __getattr__(name: str) -> Any:
    """`jobcore_otel.plugin`, the entry point, chosen anew from the environment on each load."""
    if name == "plugin":
        return load_plugin()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
