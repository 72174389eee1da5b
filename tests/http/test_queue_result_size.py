"""`PUT /api/queue/{id}` refuses a result over `max_result_bytes` (413), as `/result` and
batched reports do. Before the fix it stored it (900 KB where the limit is 256 KiB)."""

from __future__ import annotations

import uuid

from hubproc import Hub, Tokens


def test_a_json_queue_result_over_max_result_bytes_is_413_and_the_job_stays_claimed(
    hub: Hub, tokens: Tokens
) -> None:
    big = "x" * 300_000  # the default max_result_bytes is 256 KiB
    with hub.client(tokens.produce) as producer, hub.client(tokens.agent) as agent:
        marker = uuid.uuid4().hex
        added = producer.post("/api/queue", json={"type": "noop", "data": {}})
        assert added.status_code == 201, added.text
        claimed = agent.get("/api/queue")
        assert claimed.status_code == 200, claimed.text
        job_id = claimed.json()["id"]
        refused = agent.put(f"/api/queue/{job_id}", json={"status": "completed", "result": big})
        assert refused.status_code == 413, refused.text
        assert "max_result_bytes" in refused.json()["error"]
        job = producer.get(f"/api/jobs/{job_id}").json()
        assert job["status"] == "claimed" and job["result"] is None
        done = agent.put(f"/api/queue/{job_id}", json={"status": "completed", "result": marker})
        assert done.status_code == 200 and done.json() == {"success": True}, done.text
        assert producer.get(f"/api/jobs/{job_id}").json()["result"] == marker
