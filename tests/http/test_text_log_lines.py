"""Untrusted text cannot forge lines of a real hub's text log.

Before the fix an agent's fail `reason` (or a job type a producer made up, on a hub
allowing unregistered types) holding a newline started a line of its own in the text
log, e.g. a fake `completed` event; control characters are now escaped (`\\n`).
"""

from __future__ import annotations

from pathlib import Path

from hubproc import Hub
from testenv import subprocess_env, wait_for

FORGED = "2026-01-01 00:00:00,000 INFO    jobcore.events: completed forged"


def test_newlines_in_reasons_and_types_stay_on_their_line(tmp_path: Path) -> None:
    env = subprocess_env(JOBCORE_ALLOW_UNREGISTERED_TYPES="true")
    hub = Hub(tmp_path / "jobs.db", "--insecure-no-auth", env=env)
    try:
        with hub.client() as client:
            made = client.post("/api/jobs", json={"type": f"odd\n{FORGED} type", "max_attempts": 1})
            assert made.status_code == 201, made.text
            claim = client.post("/api/jobs/claim", json={"worker_id": "w1"}).json()
            failed = client.post(
                f"/api/jobs/{claim['id']}/fail",
                json={
                    "worker_id": "w1",
                    "lease_id": claim["lease_id"],
                    "reason": f"boom\r\n{FORGED} reason\x1b[2J",
                },
            )
            assert failed.status_code == 200, failed.text
            assert failed.json()["status"] == "failed"
        wait_for(lambda: "boom" in hub.output())
    finally:
        assert hub.terminate() == 0, hub.output()
    lines = hub.output().splitlines()
    assert not [line for line in lines if line.startswith(FORGED)], lines
    assert "\x1b" not in hub.output()
    assert any("boom\\r\\n" + FORGED in line for line in lines), lines
    assert any("odd\\n" + FORGED in line for line in lines), lines
