"""Bulk retry/cancel need a filter or an explicit `all` (API and dashboard), on a real hub.

Before the fix `POST /api/jobs/cancel {}` cancelled every unfinished job of the store
(and `retry {}` retried every failed one): an empty body, easy to send by mistake,
meant "everything". The dashboard's bulk form did the same with no filter.
"""

from __future__ import annotations

import re
import uuid

from hubproc import Hub, Tokens


def test_an_empty_bulk_body_is_400_and_changes_nothing(hub: Hub, tokens: Tokens) -> None:
    queue = f"bulk-{uuid.uuid4().hex[:8]}"
    with hub.client(tokens.produce) as producer:
        job = producer.post("/api/jobs", json={"type": "noop", "queue": queue, "delay": 600})
        assert job.status_code == 201, job.text
        for route in ("/api/jobs/cancel", "/api/jobs/retry"):
            for body in ({}, {"status": [], "q": "", "type": ""}, {"all": False}):
                answer = producer.post(route, json=body)
                assert answer.status_code == 400, (route, body, answer.text)
                assert '"all": true' in answer.json()["error"]
        assert producer.get(f"/api/jobs/{job.json()['id']}").json()["status"] == "scheduled"
        narrowed = producer.post("/api/jobs/cancel", json={"queue": queue})
        assert narrowed.json() == {"matched": 1, "changed": 1}
        everything = producer.post("/api/jobs/retry", json={"all": True})
        assert everything.status_code == 200, everything.text
        assert everything.json()["changed"] >= 1
        assert producer.get(f"/api/jobs/{job.json()['id']}").json()["status"] == "pending"
        schema = producer.get("/openapi.json").json()["components"]["schemas"]["BulkIn"]
        assert "all" in schema["properties"]


def test_the_dashboard_bulk_action_says_all_explicitly(hub: Hub, tokens: Tokens) -> None:
    with hub.client() as browser:
        signed = browser.post("/ui/login", data={"token": tokens.produce}, follow_redirects=False)
        assert signed.status_code == 303, signed.text
        confirm = browser.get("/ui/bulk", params={"action": "cancel"})
        assert confirm.status_code == 200, confirm.text[:300]
        assert 'name="all" value="true"' in confirm.text
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', confirm.text)
        assert csrf is not None
        bare = browser.post(
            "/ui/bulk",
            data={"csrf_token": csrf.group(1), "action": "cancel"},
            follow_redirects=False,
        )
        assert bare.status_code == 400, bare.text[:300]
        explicit = browser.post(
            "/ui/bulk",
            data={"csrf_token": csrf.group(1), "action": "retry", "all": "true"},
            follow_redirects=False,
        )
        assert explicit.status_code == 303, explicit.text[:300]
