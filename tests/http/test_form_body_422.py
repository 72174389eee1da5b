"""A body sent as a form (curl's `-d` without a JSON content type) or with no content type
gets a 422 that says to send JSON. (The documentation's curl examples themselves run, as
written, against a real hub: docs/hub.md, through Sybil.)"""

from __future__ import annotations

from pathlib import Path

import httpx
from hubproc import Hub


def test_a_form_body_gets_a_422_saying_to_send_json(tmp_path: Path) -> None:
    hub = Hub(tmp_path / "jobs.db", "--insecure-no-auth")
    try:
        answer = httpx.post(
            hub.url + "/api/jobs",
            content=b'{"type": "noop"}',
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
        assert answer.status_code == 422, answer.text
        error = answer.json()["error"]
        assert "Content-Type: application/json" in error and "must be JSON" in error, error
        missing = httpx.post(hub.url + "/api/jobs/claim", content=b'{"worker_id": "a"}')
        assert missing.status_code == 422
        assert "no Content-Type" in missing.json()["error"]
    finally:
        assert hub.terminate() == 0, hub.output()
