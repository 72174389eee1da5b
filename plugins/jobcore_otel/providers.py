"""Tracer and meter providers configured from the standard `OTEL_*` environment variables.

Exporters: `OTEL_TRACES_EXPORTER` / `OTEL_METRICS_EXPORTER` = `otlp` (OTLP over
HTTP/protobuf, endpoint from `OTEL_EXPORTER_OTLP_ENDPOINT` and friends),
`console` (to stderr) or `none`. When unset they default to `otlp` if an OTLP
endpoint is configured, else `none`. The service name defaults to `jobcore`.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import NamedTuple

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricReader,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

from jobcore import ConfigError
from jobcore_otel.histograms import OtlpMetricExporter

log = logging.getLogger("jobcore.otel")


def _exporter_names(env: Mapping[str, str], signal: str) -> list[str]:
    configured = env.get(f"OTEL_{signal.upper()}_EXPORTER")
    if configured is None:
        endpoint = env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get(
            f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT"
        )
        return ["otlp"] if endpoint else []
    names = [name.strip().lower() for name in configured.split(",") if name.strip()]
    unknown = [name for name in names if name not in ("otlp", "console", "none")]
    if unknown:
        raise ConfigError(
            f"bad setting OTEL_{signal.upper()}_EXPORTER: {','.join(unknown)}; use otlp, console or none"
        )
    return [name for name in names if name != "none"]


def _check_protocol(env: Mapping[str, str], signal: str) -> None:
    for key in (f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        protocol = env.get(key)
        if protocol is not None:
            if protocol != "http/protobuf":
                raise ConfigError(
                    f"bad setting {key}: {protocol!r}; the otel extra exports http/protobuf"
                )
            return


def _endpoint(env: Mapping[str, str], signal: str) -> str | None:
    """The OTLP/HTTP URL for `signal` from `env` (None: the SDK's default, localhost:4318)."""
    specific = env.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT")
    if specific:
        return specific
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    return f"{base.rstrip('/')}/v1/{signal}" if base else None


def configured_exporters(env: Mapping[str, str]) -> list[str]:
    """`signal:exporter` for each exporter `env` configures; ConfigError naming a bad setting."""
    found = []
    for signal in ("traces", "metrics"):
        names = _exporter_names(env, signal)
        if "otlp" in names:
            _check_protocol(env, signal)
        found += [f"{signal}:{name}" for name in names]
    interval = env.get("OTEL_METRIC_EXPORT_INTERVAL", "60000")
    if not interval.isdigit() or int(interval) <= 0:
        raise ConfigError(
            f"bad setting OTEL_METRIC_EXPORT_INTERVAL: {interval!r}; use a positive number of ms"
        )
    return found


class Providers(NamedTuple):
    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    # The tracer provider's span processor when it is the only one, OTLP's: it may be
    # given spans directly (`job_span.JobSpan`), nothing else would see them.
    span_processor: SpanProcessor | None
    # The meter provider's exporter when it is the only one, OTLP's, and takes
    # explicit-bucket histograms: the per-job histograms may be aggregated for it.
    metric_exporter: OtlpMetricExporter | None


def providers_from_env(env: Mapping[str, str] | None = None) -> Providers:
    """The providers the `OTEL_*` settings in `env` (default `os.environ`) describe."""
    env = os.environ if env is None else env
    configured_exporters(env)  # raises on a bad setting before anything is built
    resource = Resource.create({"service.name": env.get("OTEL_SERVICE_NAME") or "jobcore"})
    tracer_provider = TracerProvider(resource=resource)
    trace_exporters = _exporter_names(env, "traces")
    otlp: SpanProcessor | None = None
    for name in trace_exporters:
        if name == "otlp":
            _check_protocol(env, "traces")
            from jobcore_otel.otlp_export import OtlpSpanExporter

            otlp = BatchSpanProcessor(OtlpSpanExporter(endpoint=_endpoint(env, "traces")))
            tracer_provider.add_span_processor(otlp)
        else:
            tracer_provider.add_span_processor(
                BatchSpanProcessor(ConsoleSpanExporter(out=sys.stderr))
            )
    readers: list[MetricReader] = []
    otlp_metrics: OtlpMetricExporter | None = None
    interval = int(env.get("OTEL_METRIC_EXPORT_INTERVAL", "60000"))
    for name in _exporter_names(env, "metrics"):
        if name == "otlp":
            _check_protocol(env, "metrics")
            otlp_metrics = OtlpMetricExporter(endpoint=_endpoint(env, "metrics"))
            readers.append(
                PeriodicExportingMetricReader(otlp_metrics, export_interval_millis=interval)
            )
        else:
            readers.append(
                PeriodicExportingMetricReader(
                    ConsoleMetricExporter(out=sys.stderr), export_interval_millis=interval
                )
            )
    if otlp_metrics is not None and (len(readers) > 1 or not otlp_metrics.aggregates_here()):
        otlp_metrics = None
    if otlp_metrics is not None:
        otlp_metrics.resource = resource
    return Providers(
        tracer_provider,
        MeterProvider(resource=resource, metric_readers=readers),
        otlp if trace_exporters == ["otlp"] else None,
        otlp_metrics,
    )
