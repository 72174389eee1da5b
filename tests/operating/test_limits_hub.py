"""Concurrency limits through a real `jobcore serve` on SQLite and PostgreSQL (DESIGN §16):
admin tokens set and clear them (others are refused, bad values answered 422/400);
agents' claims respect them and an agent's report frees the slot; /api/limits,
/api/stats, /api/queues and the dashboard show them."""

from __future__ import annotations

from hubproc import Hub, Tokens

AGENT = {"worker_id": "agent-1"}


def test_limits_set_through_the_hub_hold_for_agents(served: tuple[Hub, Tokens]) -> None:
    hub, tokens = served
    with (
        hub.client(tokens.admin) as admin,
        hub.client(tokens.produce) as producer,
        hub.client(tokens.agent) as agent,
    ):
        assert producer.put("/api/types/noop/limit", json={"concurrency": 2}).status_code == 403
        for bad in (0, -1, 10**7, "two", 1.5, None):
            answer = admin.put("/api/types/noop/limit", json={"concurrency": bad})
            assert answer.status_code == 422, (bad, answer.text)
        assert admin.get("/api/limits").json() == {"limits": []}
        made = admin.put("/api/types/noop/limit", json={"concurrency": 2})
        assert made.status_code == 200, made.text
        assert made.json() == {"scope": "type", "name": "noop", "concurrency": 2, "source": "set"}
        queue_limit = admin.put("/api/queues/mail/limit", json={"concurrency": 1})
        assert queue_limit.status_code == 200
        for _ in range(5):
            assert producer.post("/api/jobs", json={"type": "noop"}).status_code == 201
        got = agent.post("/api/jobs/claim", json={**AGENT, "max_jobs": 5})
        assert got.status_code == 200 and len(got.json()) == 2
        assert agent.post("/api/jobs/claim", json={**AGENT, "max_jobs": 5}).status_code == 204
        listed = admin.get("/api/limits").json()["limits"]
        assert [(r["scope"], r["name"], r["held"]) for r in listed] == [
            ("queue", "mail", 0),
            ("type", "noop", 2),
        ]
        stats = producer.get("/api/stats").json()
        assert {(r["name"], r["held"]) for r in stats["limits"]} == {("mail", 0), ("noop", 2)}
        queues = {r["queue"]: r for r in producer.get("/api/queues").json()["queues"]}
        assert queues["mail"]["concurrency"] == 1 and queues["default"]["concurrency"] is None
        # an agent's report frees its slot: the next claim gets the next job
        first = got.json()[0]
        done = agent.post(
            "/api/jobs/reports",
            json={
                **AGENT,
                "reports": [
                    {"job_id": first["id"], "lease_id": first["lease_id"], "kind": "result"}
                ],
            },
        )
        assert done.status_code == 200, done.text
        again = agent.post("/api/jobs/claim", json={**AGENT, "max_jobs": 5})
        assert again.status_code == 200 and len(again.json()) == 1
        cleared = admin.delete("/api/types/noop/limit")
        assert cleared.json() == {"scope": "type", "name": "noop", "cleared": True}
        assert admin.delete("/api/types/noop/limit").json()["cleared"] is False
        rest = agent.post("/api/jobs/claim", json={**AGENT, "max_jobs": 5})
        assert rest.status_code == 200 and len(rest.json()) == 2
        key = admin.put("/api/types/noop/key-limit", json={"concurrency": 3})
        assert key.json()["scope"] == "key"
        assert admin.delete("/api/types/noop/key-limit").json()["cleared"] is True


def test_the_dashboard_overview_shows_limits(served: tuple[Hub, Tokens]) -> None:
    hub, tokens = served
    with hub.client(tokens.admin) as admin:
        admin.put("/api/queues/mail/limit", json={"concurrency": 4})
        signed = admin.post("/ui/login", data={"token": tokens.read, "next": "/"})
        assert signed.status_code == 303, signed.text
        overview = admin.get("/").text
    assert "Concurrency and rate limits" in overview and "<td>mail</td>" in overview
