"""The per-job histograms aggregated by the plugin equal the SDK's, cumulative and delta."""

from __future__ import annotations

import math
import threading
import time
from typing import Any

import pytest
from jobcore_otel.histograms import FOLD_AT, JobHistogram, OtlpMetricExporter
from opentelemetry.sdk.metrics import Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    InMemoryMetricReader,
    MetricsData,
)
from opentelemetry.sdk.metrics.view import ExponentialBucketHistogramAggregation

VALUES = [0.0, 0.5, 5.0, 5.000001, 7, 10000.0, 10000.5, 123456.0, 2.5, -1.0, math.nan, math.inf]


def points(data: MetricsData | None) -> list[dict[str, Any]]:
    found = []
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    found.append(
                        {
                            "scope": scope.scope.name,
                            "name": metric.name,
                            "unit": metric.unit,
                            "description": metric.description,
                            "temporality": metric.data.aggregation_temporality,
                            "attributes": dict(point.attributes),
                            "count": point.count,
                            "sum": point.sum,
                            "buckets": tuple(point.bucket_counts),
                            "bounds": tuple(point.explicit_bounds),
                            "min": point.min,
                            "max": point.max,
                        }
                    )
    return sorted(found, key=lambda p: (p["name"], p["attributes"]["jobcore.job.type"]))


@pytest.mark.parametrize("temporality", list(AggregationTemporality)[1:])
def test_the_same_data_points_as_the_sdk(temporality: AggregationTemporality) -> None:
    reader = InMemoryMetricReader(preferred_temporality={Histogram: temporality})
    sdk = MeterProvider(metric_readers=[reader]).get_meter("jobcore")
    theirs = sdk.create_histogram("jobcore.job.duration", unit="ms", description="run time")
    ours = JobHistogram("jobcore.job.duration", "ms", "run time")
    mine: list[Any] = []
    for round_values in (VALUES, [], [3.0]):  # a second export with nothing new, then more
        for n, value in enumerate(round_values):
            for histogram in (theirs, ours):
                histogram.record(value, {"jobcore.job.type": "a" if n % 3 else "b"})
        expected = points(reader.get_metrics_data())
        metric = ours.collect(temporality, 0)
        mine = points(MetricsData([]) if metric is None else _data(metric))
        assert [{**p, "scope": "jobcore"} for p in mine] == expected


def _data(metric: Any) -> MetricsData:
    from jobcore_otel.histograms import _with

    return _with(MetricsData(resource_metrics=[]), [metric], None)


def test_the_exporter_adds_them_to_the_jobcore_scope_and_keeps_the_rest() -> None:
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("jobcore")
    meter.create_counter("jobcore.other").add(1)
    data = reader.get_metrics_data()
    assert data is not None
    histogram = JobHistogram("jobcore.job.queue_wait", "ms", "wait")
    histogram.record(1.0, {"jobcore.job.type": "t"})
    metric = histogram.collect(AggregationTemporality.CUMULATIVE, 0)
    assert metric is not None
    from jobcore_otel.histograms import _with

    [resource] = _with(data, [metric], None).resource_metrics
    [scope] = resource.scope_metrics
    assert [m.name for m in scope.metrics] == ["jobcore.other", "jobcore.job.queue_wait"]


def test_an_exporter_preferring_exponential_histograms_leaves_them_to_the_sdk() -> None:
    exporter = OtlpMetricExporter(endpoint="http://127.0.0.1:9/v1/metrics")
    assert exporter.aggregates_here()
    exponential = OtlpMetricExporter(
        endpoint="http://127.0.0.1:9/v1/metrics",
        preferred_aggregation={Histogram: ExponentialBucketHistogramAggregation()},
    )
    assert not exponential.aggregates_here()


def test_the_exporter_asks_for_the_temporality_the_environment_prefers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert OtlpMetricExporter().temporality() is AggregationTemporality.CUMULATIVE
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "delta")
    assert OtlpMetricExporter().temporality() is AggregationTemporality.DELTA
    monkeypatch.setenv(
        "OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION",
        "base2_exponential_bucket_histogram",
    )
    assert not OtlpMetricExporter().aggregates_here()


@pytest.mark.parametrize("temporality", list(AggregationTemporality)[1:])
def test_a_type_first_seen_after_the_export_read_its_clock_starts_no_later_than_it(
    temporality: AggregationTemporality,
) -> None:
    """Another thread's job may begin a series between the exporter's `time_ns()` and the
    collection: a point must not start after its own time (backends reject such points)."""
    histogram = JobHistogram("jobcore.job.duration", "ms", "run time")
    read_clock = time.time_ns()
    time.sleep(0.002)
    histogram.record(1.0, {"jobcore.job.type": "late"})
    metric = histogram.collect(temporality, read_clock)
    assert metric is not None
    [point] = metric.data.data_points
    assert point.start_time_unix_nano <= point.time_unix_nano == read_clock
    assert point.count == 1


def test_values_recorded_by_many_threads_are_each_counted_once_across_folds() -> None:
    """`record` only queues a value; the queue is folded every `FOLD_AT` values by whichever
    thread crosses it, and by `collect`: no value is lost or added twice meanwhile."""
    histogram = JobHistogram("jobcore.job.duration", "ms", "run time")
    per_thread = FOLD_AT * 3 + 7
    start = threading.Barrier(4)
    seen: list[int] = []

    def record(n: int) -> None:
        start.wait()
        for i in range(per_thread):
            histogram.record(float(i % 7), {"jobcore.job.type": f"t{n % 2}"})
            if n == 0 and i % 500 == 0:  # collections racing the folds
                metric = histogram.collect(AggregationTemporality.DELTA, time.time_ns())
                if metric is not None:
                    seen.extend(p.count for p in metric.data.data_points)

    threads = [threading.Thread(target=record, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    metric = histogram.collect(AggregationTemporality.DELTA, time.time_ns())
    rest = [] if metric is None else [p.count for p in metric.data.data_points]
    assert sum(seen) + sum(rest) == 4 * per_thread
    cumulative = histogram.collect(AggregationTemporality.CUMULATIVE, time.time_ns())
    assert cumulative is not None
    points = {p.attributes["jobcore.job.type"]: p for p in cumulative.data.data_points}
    expected_sum = 2 * sum(float(i % 7) for i in range(per_thread))
    for job_type in ("t0", "t1"):
        assert points[job_type].count == 2 * per_thread
        assert points[job_type].sum == expected_sum
        assert (points[job_type].min, points[job_type].max) == (0.0, 6.0)


def test_an_ignored_value_does_not_start_its_series() -> None:
    """A NaN, infinite or negative value is dropped at `record`, as the SDK drops it: the
    series starts at its first value that counts."""
    histogram = JobHistogram("jobcore.job.duration", "ms", "run time")
    histogram.record(math.nan, {"jobcore.job.type": "a"})
    assert histogram.collect(AggregationTemporality.CUMULATIVE, time.time_ns()) is None
    time.sleep(0.002)
    before = time.time_ns()
    histogram.record(2.0, {"jobcore.job.type": "a"})
    metric = histogram.collect(AggregationTemporality.CUMULATIVE, time.time_ns())
    assert metric is not None
    [point] = metric.data.data_points
    assert point.start_time_unix_nano >= before and point.count == 1
