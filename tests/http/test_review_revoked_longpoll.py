"""Review: a long-poll claim outlives its auth check. An agent token revoked while its
claim waited still got the next job enqueued (its payload handed to a revoked
token; the job then sat claimed by an agent whose every heartbeat answers 401
until the lease expired). Now the claim answers 401 and the job stays claimable."""

from __future__ import annotations

import threading
import time
from typing import Any

from hubproc import Hub, Tokens


def test_a_token_revoked_during_a_long_poll_gets_no_job(hub: Hub, tokens: Tokens) -> None:
    with hub.client(tokens.admin) as admin:
        made = admin.post("/api/tokens", json={"name": "review-lp", "scope": "agent"})
        assert made.status_code == 201, made.text
        answer: dict[str, Any] = {}

        def long_poll() -> None:
            with hub.client(made.json()["token"]) as agent:
                answer["claim"] = agent.post(
                    "/api/jobs/claim",
                    json={"worker_id": "review-lp", "types": ["record"], "wait": 10},
                )

        waiter = threading.Thread(target=long_poll)
        waiter.start()
        time.sleep(1.0)  # the claim is waiting
        assert admin.delete("/api/tokens/review-lp").status_code == 204
        job = admin.post("/api/jobs", json={"type": "record", "payload": {"log": "secret"}})
        assert job.status_code == 201, job.text
        waiter.join(20)
        claim = answer["claim"]
        assert claim.status_code == 401, claim.text
        assert "secret" not in claim.text
        again = admin.get(f"/api/jobs/{job.json()['id']}").json()
        assert again["status"] == "pending", again
        assert again["attempts"] == 0
        assert admin.delete(f"/api/jobs/{job.json()['id']}").status_code == 204
