"""Pause and resume through a real `jobcore serve` on SQLite and PostgreSQL (DESIGN §16):
produce or admin tokens (within their limits) pause; agents' claims skip paused work,
a waiting claim is answered once the queue is resumed; stats and /api/queues show it."""

from __future__ import annotations

import threading
from typing import Any

from hubproc import Hub, Tokens

AGENT = {"worker_id": "agent-1"}


def test_paused_work_is_not_claimed_by_agents_and_resume_answers_a_waiting_claim(
    served: tuple[Hub, Tokens],
) -> None:
    hub, tokens = served
    with hub.client(tokens.produce) as producer, hub.client(tokens.agent) as agent:
        job = producer.post("/api/jobs", json={"type": "noop", "queue": "mail"}).json()
        made = producer.post("/api/queues/mail/pause", json={"reason": "SMTP down"})
        assert made.status_code == 200, made.text
        assert made.json()["created"] and made.json()["by"] == "token producer"
        assert made.json()["reason"] == "SMTP down" and made.json()["since"].endswith("Z")
        again = producer.post("/api/queues/mail/pause")
        assert again.status_code == 200 and not again.json()["created"]
        # enqueue still works while paused
        other = producer.post("/api/jobs", json={"type": "noop", "queue": "mail"})
        assert other.status_code == 201
        assert agent.post("/api/jobs/claim", json=AGENT).status_code == 204
        assert agent.get("/api/queue").status_code == 204  # the simple JSON queue too

        stats = producer.get("/api/stats").json()
        assert [(p["kind"], p["name"], p["reason"]) for p in stats["paused"]] == [
            ("queue", "mail", "SMTP down")
        ]
        rows = producer.get("/api/queues").json()
        assert rows["queues"] == [
            {
                "queue": "mail",
                "scheduled": 0,
                "pending": 2,
                "claimed": 0,
                "paused": True,
                "reason": "SMTP down",
                "since": made.json()["since"],
                "by": "token producer",
                "concurrency": None,
            }
        ]

        answers: list[Any] = []
        waiting = threading.Thread(
            target=lambda: answers.append(
                agent.post("/api/jobs/claim", json={**AGENT, "wait": 20, "max_jobs": 5})
            )
        )
        waiting.start()
        threading.Event().wait(1.0)
        assert not answers, "a claim was answered while the queue was paused"
        resumed = producer.post("/api/queues/mail/resume")
        assert resumed.json() == {"kind": "queue", "name": "mail", "resumed": True}
        waiting.join(20)
        assert answers and answers[0].status_code == 200
        ids = {claimed["id"] for claimed in answers[0].json()}
        assert job["id"] in ids and len(ids) == 2
        again_resumed = producer.post("/api/queues/mail/resume").json()
        assert again_resumed["resumed"] is False


def test_pausing_a_type_and_who_may_pause(served: tuple[Hub, Tokens]) -> None:
    hub, tokens = served
    with hub.client(tokens.admin) as admin:
        limited = admin.post(
            "/api/tokens", json={"name": "mailer", "scope": "produce", "queues": ["mail"]}
        ).json()["token"]
        admin.post("/api/jobs", json={"type": "noop", "queue": "mail"})
        for token, path, code in (
            (tokens.read, "/api/queues/mail/pause", 403),
            (tokens.agent, "/api/queues/mail/pause", 403),
            (limited, "/api/queues/other/pause", 403),  # beyond its queues
            (limited, "/api/types/noop/pause", 403),  # a type spans every queue
            (None, "/api/queues/mail/pause", 401),
        ):
            with hub.client(token) as client:
                answer = client.post(path)
                assert answer.status_code == code, (path, answer.text)
                assert "error" in answer.json()
        assert admin.get("/api/stats").json()["paused"] == []
        with hub.client(limited) as client:
            assert client.post("/api/queues/mail/pause").status_code == 200
            assert client.post("/api/queues/mail/resume").json()["resumed"] is True
        bad = admin.post("/api/types/noop/pause", json={"reason": "x", "extra": 1})
        assert bad.status_code in (400, 422)
        assert admin.post("/api/shelves/noop/pause").status_code in (404, 405)
        assert admin.post("/api/types/noop/pause", json={"reason": "a\x00b"}).status_code in (
            400,
            422,
        )
        assert admin.get("/api/stats").json()["paused"] == []  # nothing written by those
        made = admin.post("/api/types/noop/pause", json={"reason": "bad deploy"})
        assert made.status_code == 200 and made.json()["kind"] == "type"
    with hub.client(tokens.agent) as agent:
        assert agent.post("/api/jobs/claim", json=AGENT).status_code == 204
    with hub.client(tokens.admin) as admin:
        assert admin.post("/api/types/noop/resume").json()["resumed"] is True
    with hub.client(tokens.agent) as agent:
        assert agent.post("/api/jobs/claim", json=AGENT).status_code == 200
