"""Requests the HTTP parser refuses are answered `{"error": ...}` like every other 4xx.

Before the fix uvicorn answered them `text/plain` "Invalid HTTP request received."
(a NUL or other control character in a header such as Idempotency-Key or Last-Event-ID,
conflicting Content-Length headers, a bad chunk size, an HTTP/2 preface).
"""

from __future__ import annotations

import json
import socket

import pytest
from hubproc import Hub

MALFORMED = [
    b"POST /api/jobs HTTP/1.1\r\nHost: x\r\nIdempotency-Key: a\x00b\r\nContent-Length: 2\r\n\r\n{}",
    b"GET /api/events HTTP/1.1\r\nHost: x\r\nLast-Event-ID: 1\x00\r\n\r\n",
    b"GET /api/health HTTP/1.1\r\nHost: x\r\nX: a\x01b\r\n\r\n",
    b"GET /api/health HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
    b"POST /api/jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    + b"f" * 100
    + b"\r\n",
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    b"GET /api/he\x00alth HTTP/1.1\r\nHost: x\r\n\r\n",
]


@pytest.mark.parametrize("request_bytes", MALFORMED, ids=range(len(MALFORMED)))
def test_a_malformed_request_is_a_json_400(hub: Hub, request_bytes: bytes) -> None:
    with socket.create_connection(("127.0.0.1", hub.port), timeout=10) as sock:
        sock.sendall(request_bytes)
        answer = b""
        while chunk := sock.recv(65536):  # the hub closes the connection after it
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 "), answer
    assert b"content-type: application/json" in head.lower()
    assert "not valid HTTP/1.1" in json.loads(body)["error"]
