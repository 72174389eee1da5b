"""Review: hostile JSON that Python parses but JSON cannot carry, against a real hub.

Before the fix a lone surrogate escape in a payload was written and then its
enqueue answered 400 (the batch route wrote every job of a batch it refused);
every claim that met the job then answered 400 with its jobs claimed for
nobody until their lease expired, and every listing holding it failed. `NaN`,
`Infinity` and `1e400` were stored as `null`; a payload nested 256 deep was a
500; artifacts over `--max-body` (1 MiB) could not be uploaded at all.
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

from hubproc import Hub, Tokens

JSON = {"content-type": "application/json"}


def _rows(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT count(*) FROM jobs").fetchone()[0])


def test_lone_surrogates_are_refused_before_anything_is_written(
    hub: Hub, hub_db: Path, tokens: Tokens
) -> None:
    with hub.client(tokens.admin) as admin:
        before = _rows(hub_db)
        bodies = [
            b'{"type": "record", "payload": {"log": "\\ud800"}}',
            b'{"type": "record", "payload": {"log": "a", "\\udfff": 1}}',
            b'{"jobs": [{"type": "noop", "idempotency_key": "review-ok"},'
            b' {"type": "record", "payload": {"log": "\\udc80"}}]}',
        ]
        for path, body in zip(("/api/jobs", "/api/jobs", "/api/jobs/batch"), bodies, strict=True):
            answer = admin.post(path, content=body, headers=JSON)
            assert answer.status_code == 400, answer.text
            assert "surrogate" in answer.json()["error"]
        assert _rows(hub_db) == before  # nothing written
        pair = b'{"type": "record", "payload": {"log": "\\ud83d\\ude00"}}'
        answer = admin.post("/api/jobs", content=pair, headers=JSON)
        assert answer.status_code == 201, answer.text
        assert answer.json()["payload"]["log"] == "\U0001f600"
        text = b'{"type": "record", "payload": {"log": "\\\\ud800"}}'
        escaped = admin.post("/api/jobs", content=text, headers=JSON)
        assert escaped.status_code == 201, escaped.text  # a backslash, then text: fine
        assert admin.get("/api/jobs").status_code == 200


def test_nan_infinity_and_overflowing_numbers_are_400_not_null(hub: Hub, tokens: Tokens) -> None:
    with hub.client(tokens.produce) as producer:
        for raw in (b"NaN", b"Infinity", b"-Infinity", b"1e400", b"1" * 400 + b".5"):
            answer = producer.post(
                "/api/jobs",
                content=b'{"type": "fail", "payload": {"seconds": ' + raw + b"}}",
                headers=JSON,
            )
            assert answer.status_code == 400, (raw[:20], answer.text)
            assert "not valid JSON" in answer.json()["error"]
        assert producer.post("/api/jobs", json={"type": "noop", "priority": 5}).status_code == 201


def test_a_result_with_a_lone_surrogate_is_refused(hub: Hub, tokens: Tokens) -> None:
    with hub.client(tokens.agent) as agent:
        answer = agent.post(
            "/api/jobs/nope/result",
            content=b'{"worker_id": "agent-1", "result": {"x": "\\ud800"}}',
            headers=JSON,
        )
        assert answer.status_code == 400, answer.text


def test_artifacts_larger_than_max_body_upload(hub: Hub, tokens: Tokens) -> None:
    blob = b"\x7fELF" + bytes(range(256)) * 8192  # 2 MiB, over the default --max-body
    with hub.client(tokens.admin) as admin:
        answer = admin.post(
            "/api/artifacts", content=blob, headers={"content-type": "application/octet-stream"}
        )
        assert answer.status_code in (200, 201), answer.text
        digest = hashlib.sha256(blob).hexdigest()
        assert answer.json()["sha256"] == digest
        assert admin.get(f"/api/artifacts/{digest}").content == blob
