"""Rate limits through a real `jobcore serve` on SQLite and PostgreSQL (DESIGN §16): admin
tokens set them (`{"rate", "period"}`, bad values 422 and nothing changed); agents'
claims respect them, and a claim waiting on a full window is answered when it opens;
/api/limits and /api/stats show the starts in the window."""

from __future__ import annotations

import time

import pytest
from hubproc import Hub, Tokens

AGENT = {"worker_id": "agent-1"}


def test_rate_limits_set_through_the_hub_hold_for_agents(served: tuple[Hub, Tokens]) -> None:
    hub, tokens = served
    with (
        hub.client(tokens.admin) as admin,
        hub.client(tokens.produce) as producer,
        hub.client(tokens.agent) as agent,
    ):
        assert (
            producer.put("/api/queues/api/limit", json={"rate": 2, "period": 1}).status_code == 403
        )
        bad_bodies = [
            {"rate": 0, "period": 1},
            {"rate": 10**7, "period": 1},
            {"rate": 1.5, "period": 1},
            {"rate": "two", "period": 1},
            {"rate": 2, "period": 0},
            {"rate": 2, "period": -1},
            {"rate": 2, "period": 86_401},
            {"rate": 2, "period": "inf"},
            {"rate": 2, "period": "nan"},
            {"rate": 2},
            {"period": 1},
            {},
            {"concurrency": 2, "rate": 0, "period": 1},  # nothing of it is set
        ]
        for bad in bad_bodies:
            answer = admin.put("/api/queues/api/limit", json=bad)
            assert answer.status_code == 422, (bad, answer.text)
        assert admin.get("/api/limits").json() == {"limits": []}
        made = admin.put("/api/queues/api/limit", json={"rate": 2, "period": 1.5})
        assert made.status_code == 200, made.text
        assert made.json() == {
            "scope": "queue",
            "name": "api",
            "rate": 2,
            "period": 1.5,
            "source": "set",
        }
        for _ in range(3):
            sent = producer.post("/api/jobs", json={"type": "noop", "queue": "api"})
            assert sent.status_code == 201
        got = agent.post("/api/jobs/claim", json={**AGENT, "max_jobs": 5})
        assert got.status_code == 200 and len(got.json()) == 2
        first = time.monotonic()
        listed = admin.get("/api/limits").json()["limits"]
        assert [(r["scope"], r["name"], r["rate"], r["used"]) for r in listed] == [
            ("queue", "api", 2, 2)
        ]
        stats = producer.get("/api/stats").json()
        assert [(r["name"], r["rate"], r["period"], r["used"]) for r in stats["limits"]] == [
            ("api", 2, 1.5, 2)
        ]
        # a long-poll waiting on the full window is answered when it opens, not at its end
        late = agent.post("/api/jobs/claim", json={**AGENT, "max_jobs": 5, "wait": 20})
        answered = time.monotonic() - first
        assert late.status_code == 200 and len(late.json()) == 1
        assert 1.0 <= answered < 10
        # an agent's RetryAfter(s, limit=True) arrives as `hold_limit` on its fail report
        assert (
            admin.put("/api/queues/held/limit", json={"rate": 100, "period": 1}).status_code == 200
        )
        for _ in range(3):
            producer.post("/api/jobs", json={"type": "noop", "queue": "held"})
        [taken] = agent.post(
            "/api/jobs/claim", json={**AGENT, "max_jobs": 1, "queues": ["held"]}
        ).json()
        fail = {**AGENT, "lease_id": taken["lease_id"], "retry_in": 0}
        for bad in (0, -1, 86_401, "inf", "nan", "soon"):
            refused = agent.post(f"/api/jobs/{taken['id']}/fail", json={**fail, "hold_limit": bad})
            assert refused.status_code == 422, (bad, refused.text)
        held = agent.post(f"/api/jobs/{taken['id']}/fail", json={**fail, "hold_limit": 30})
        assert held.status_code == 200, held.text
        none = agent.post("/api/jobs/claim", json={**AGENT, "max_jobs": 5, "queues": ["held"]})
        assert none.status_code == 204  # 3 claimable, none claimed: the queue is held
        [row] = [r for r in admin.get("/api/limits").json()["limits"] if r["name"] == "held"]
        assert row["used"] == 1 and row["held_until"] is not None  # one start; a hold is none
        with hub.client(tokens.read) as reader:
            signed = reader.post("/ui/login", data={"token": tokens.read, "next": "/"})
            assert signed.status_code == 303, signed.text
            assert f"1 started, held until {row['held_until']}" in reader.get("/").text
        both = admin.put(
            "/api/types/noop/key-limit", json={"concurrency": 3, "rate": 5, "period": 60}
        )
        assert both.json()["concurrency"] == 3 and both.json()["rate"] == 5
        assert admin.delete("/api/types/noop/key-limit").json()["cleared"] is True
        assert admin.delete("/api/queues/api/limit").json()["cleared"] is True
        assert admin.delete("/api/queues/api/limit").json()["cleared"] is False
        assert admin.delete("/api/queues/held/limit").json()["cleared"] is True
        assert admin.get("/api/limits").json() == {"limits": []}


@pytest.mark.parametrize("store_db", ["sqlite"], indirect=True)
def test_the_dashboard_shows_rate_limits(served: tuple[Hub, Tokens]) -> None:
    hub, tokens = served
    with hub.client(tokens.admin) as admin:
        assert (
            admin.put("/api/types/noop/limit", json={"rate": 50, "period": 60}).status_code == 200
        )
        signed = admin.post("/ui/login", data={"token": tokens.read, "next": "/"})
        assert signed.status_code == 303, signed.text
        overview = admin.get("/").text
    assert "Concurrency and rate limits" in overview and "50/1m" in overview
