"""The two per-job histograms (`jobcore.job.duration`, `jobcore.job.queue_wait`), aggregated here.

The SDK's `Histogram.record` cleans and hashes the attributes and builds a
`Measurement` for every value: two per job, about as much as the job's span.
When the plugin built the meter provider itself with the OTLP exporter as its
only reader (and the default explicit-bucket aggregation), it aggregates these
two by job type here instead (a bucket index and four additions per value) and
its exporter adds them to each export: the data points the SDK would have
made (same boundaries, count, sum, min, max, start times, cumulative or delta
as the exporter prefers), without exemplars (the SDK's default filter keeps
none here: no span is current on the thread that records them).
"""

from __future__ import annotations

import math
import threading
from bisect import bisect_left
from collections import deque
from collections.abc import Sequence
from dataclasses import replace
from time import time_ns
from typing import Any

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics import Histogram as HistogramInstrument
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricExportResult,
    MetricsData,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

# the SDK's default explicit buckets
BOUNDARIES = (
    0.0,
    5.0,
    10.0,
    25.0,
    50.0,
    75.0,
    100.0,
    250.0,
    500.0,
    750.0,
    1000.0,
    2500.0,
    5000.0,
    7500.0,
    10000.0,
)
TYPE = "jobcore.job.type"
FOLD_AT = 1024  # values queued before the recording thread folds them


class _Series:
    """One job type's values: since the start (cumulative) and since the last export (delta)."""

    def __init__(self, now: int) -> None:
        self.start = now  # the first value's time, as the SDK's aggregation
        self.last_export = now
        self.total = _Counts()
        self.recent = _Counts()


class _Counts:
    def __init__(self) -> None:
        self.buckets = [0] * (len(BOUNDARIES) + 1)
        self.sum = 0.0
        self.min = math.inf
        self.max = -math.inf

    def add(self, value: float) -> None:
        self.buckets[bisect_left(BOUNDARIES, value)] += 1
        self.sum += value
        if value < self.min:
            self.min = value
        if value > self.max:
            self.max = value


class JobHistogram:
    """A histogram of milliseconds by job type; `record` has the SDK instrument's checks.

    A value is only queued where it is recorded (one `deque.append`, safe from any
    thread); the queue is folded into the buckets in a loop, every `FOLD_AT` values and
    before each `collect`. Per job, that is cheaper than adding each value on its own.
    """

    def __init__(self, name: str, unit: str, description: str) -> None:
        self.name, self.unit, self.description = name, unit, description
        self._series: dict[str, _Series] = {}
        self._first: dict[str, int] = {}  # when each job type's first value was recorded
        self._queued: deque[tuple[str, float]] = deque()
        self._lock = threading.Lock()

    def record(self, amount: float, attributes: dict[str, str]) -> None:
        if not 0 <= amount < math.inf:  # NaN, infinities, negative: the SDK ignores these
            return  # (with a warning)
        job_type = attributes[TYPE]
        if job_type not in self._first:  # a series starts at its first value, as the SDK's
            self._first.setdefault(job_type, time_ns())
        queued = self._queued
        queued.append((job_type, amount))
        if len(queued) >= FOLD_AT:
            self._fold()

    def _fold(self) -> None:
        """Add the queued values to their series (each taken once, whichever thread folds)."""
        with self._lock:
            take = self._queued.popleft
            series_of = self._series
            while True:
                try:
                    job_type, amount = take()
                except IndexError:
                    return
                series = series_of.get(job_type)
                if series is None:
                    series = series_of[job_type] = _Series(self._first[job_type])
                series.total.add(amount)
                series.recent.add(amount)

    def collect(self, temporality: AggregationTemporality, now: int) -> Metric | None:
        """The metric as the SDK would export it at `now` (None: no data point)."""
        points = []
        self._fold()
        with self._lock:
            for job_type, series in self._series.items():
                delta = temporality is AggregationTemporality.DELTA
                counts = series.recent if delta else series.total
                # a series begun after the exporter read its clock starts no later than `now`
                start = min(series.last_export if delta else series.start, now)
                recent = sum(series.recent.buckets)
                series.recent, series.last_export = _Counts(), now
                if delta and not recent:
                    continue
                points.append(
                    HistogramDataPoint(
                        attributes={TYPE: job_type},
                        start_time_unix_nano=start,
                        time_unix_nano=now,
                        count=sum(counts.buckets),
                        sum=counts.sum,
                        bucket_counts=tuple(counts.buckets),
                        explicit_bounds=BOUNDARIES,
                        min=counts.min,
                        max=counts.max,
                        exemplars=[],
                    )
                )
        if not points:
            return None
        return Metric(
            name=self.name,
            description=self.description,
            unit=self.unit,
            data=Histogram(data_points=points, aggregation_temporality=temporality),
        )


class OtlpMetricExporter(OTLPMetricExporter):
    """`OTLPMetricExporter` that adds `histograms` to every export, in scope `jobcore`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.histograms: Sequence[JobHistogram] = ()
        self.resource: Resource | None = None

    def aggregates_here(self) -> bool:
        """Whether this exporter takes explicit-bucket histograms (the default), so
        `JobHistogram`s make what the SDK would."""
        preferred = (self._preferred_aggregation or {}).get(HistogramInstrument)
        return preferred is None or isinstance(preferred, ExplicitBucketHistogramAggregation)

    def temporality(self) -> AggregationTemporality:
        """What this exporter asks histograms for (`OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE`)."""
        preferred = (self._preferred_temporality or {}).get(HistogramInstrument)
        return preferred or AggregationTemporality.CUMULATIVE

    def export(
        self, metrics_data: MetricsData, timeout_millis: float | None = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        temporality, now = self.temporality(), time_ns()
        added = [m for m in (h.collect(temporality, now) for h in self.histograms) if m is not None]
        if added:
            metrics_data = _with(metrics_data, added, self.resource)
        return super().export(metrics_data, timeout_millis, **kwargs)


def _with(data: MetricsData, metrics: list[Metric], resource: Resource | None) -> MetricsData:
    """`data` with `metrics` added to its `jobcore` scope (made if missing)."""
    resources = list(data.resource_metrics)
    for i, resource_metrics in enumerate(resources):
        for j, scope_metrics in enumerate(resource_metrics.scope_metrics):
            if scope_metrics.scope.name == "jobcore":
                scopes = list(resource_metrics.scope_metrics)
                scopes[j] = replace(scope_metrics, metrics=[*scope_metrics.metrics, *metrics])
                resources[i] = replace(resource_metrics, scope_metrics=scopes)
                return MetricsData(resource_metrics=resources)
    scope = ScopeMetrics(scope=InstrumentationScope("jobcore"), metrics=metrics, schema_url="")
    if resources:
        first = resources[0]
        resources[0] = replace(first, scope_metrics=[*first.scope_metrics, scope])
    else:
        resources = [
            ResourceMetrics(
                resource=resource or Resource.get_empty(), scope_metrics=[scope], schema_url=""
            )
        ]
    return MetricsData(resource_metrics=resources)
