"""An OTLP/HTTP receiver on 127.0.0.1 for tests of exported telemetry (the otel plugin)."""

from __future__ import annotations

import gzip
import zlib
from http.server import BaseHTTPRequestHandler
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from testenv import LocalHTTPServer


class OtlpReceiver:
    """An OTLP/HTTP receiver on 127.0.0.1 decoding the protobuf requests it gets."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.metric_names: set[str] = set()
        self.histograms: dict[str, dict[str, tuple[int, float]]] = {}  # name -> type -> count, sum
        self.encodings: set[tuple[str, str | None]] = set()  # (path, content-encoding)
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                encoding = self.headers.get("content-encoding")
                receiver.encodings.add((self.path, encoding))
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                if self.path == "/v1/traces":
                    request = ExportTraceServiceRequest.FromString(body)
                    for resource in request.resource_spans:
                        service = next(
                            a.value.string_value
                            for a in resource.resource.attributes
                            if a.key == "service.name"
                        )
                        for scope in resource.scope_spans:
                            for span in scope.spans:
                                receiver.spans.append(
                                    {
                                        "name": span.name,
                                        "kind": span.kind,
                                        "trace": span.trace_id.hex(),
                                        "id": span.span_id.hex(),
                                        "parent": span.parent_span_id.hex(),
                                        "seconds": (
                                            span.end_time_unix_nano - span.start_time_unix_nano
                                        )
                                        / 1e9,
                                        "status": span.status.code,
                                        "events": [event.name for event in span.events],
                                        "service": service,
                                        "attributes": {
                                            a.key: a.value.string_value or a.value.int_value
                                            for a in span.attributes
                                        },
                                    }
                                )
                elif self.path == "/v1/metrics":
                    request = ExportMetricsServiceRequest.FromString(body)
                    for resource in request.resource_metrics:
                        for scope in resource.scope_metrics:
                            receiver.metric_names.update(m.name for m in scope.metrics)
                            for metric in scope.metrics:
                                for point in metric.histogram.data_points:  # cumulative: latest
                                    [job_type] = [
                                        a.value.string_value
                                        for a in point.attributes
                                        if a.key == "jobcore.job.type"
                                    ]
                                    receiver.histograms.setdefault(metric.name, {})[job_type] = (
                                        point.count,
                                        point.sum,
                                    )
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

        self.http = LocalHTTPServer(Handler)
        self.endpoint = self.http.url

    def close(self) -> None:
        self.http.close()
