"""A minimal OTLP/HTTP receiver on 127.0.0.1 for the benchmark's exporter row.

It answers every POST with 200 and keeps the request bodies; they are decoded
only after the measurement (`span_count`), so the receiver costs little CPU
while the worker runs.
"""

from __future__ import annotations

import gzip
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class OtlpSink:
    def __init__(self) -> None:
        self.bodies: list[tuple[str, bytes]] = []
        sink = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as a collector would

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                encoding = self.headers.get("content-encoding")
                sink.bodies.append(
                    (self.path, body if encoding is None else _inflate(body, encoding))
                )
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def reset(self) -> None:
        self.bodies = []

    def span_count(self) -> int:
        """Spans received so far (decoding the stored trace requests)."""
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        count = 0
        for path, body in self.bodies:
            if path == "/v1/traces":
                request = ExportTraceServiceRequest.FromString(body)
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        count += len(scope.spans)
        return count

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _inflate(body: bytes, encoding: str) -> bytes:
    return gzip.decompress(body) if encoding == "gzip" else zlib.decompress(body)
