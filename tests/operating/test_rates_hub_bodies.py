"""A hub's limit and hold values are JSON numbers (DESIGN §8, §16): `true`, `"5"` and the
like are refused (422) and change nothing, where they used to be read as 1 and 5."""

from __future__ import annotations

from hubproc import Hub, Tokens


def test_limit_bodies_with_booleans_or_text_for_numbers_are_refused(
    served: tuple[Hub, Tokens],
) -> None:
    hub, tokens = served
    with hub.client(tokens.admin) as admin, hub.client(tokens.agent) as agent:
        for bad in [
            {"rate": True, "period": 1},
            {"rate": "5", "period": 1},
            {"rate": 5, "period": True},
            {"rate": 5, "period": "60"},
            {"concurrency": True},
            {"concurrency": "3"},
        ]:
            for path in ("/api/queues/api/limit", "/api/types/noop/key-limit"):
                answer = admin.put(path, json=bad)
                assert answer.status_code == 422, (path, bad, answer.text)
                assert "JSON number" in answer.text, answer.text
        assert admin.get("/api/limits").json() == {"limits": []}  # nothing was set
        made = admin.put("/api/queues/api/limit", json={"rate": 5.0, "period": 60})
        assert made.status_code == 200, made.text  # a whole float is still a number
        for hold in (True, "30"):
            answer = agent.post(
                "/api/jobs/no-such-job/fail",
                json={"worker_id": "agent-1", "reason": "slow down", "hold_limit": hold},
            )
            assert answer.status_code == 422, (hold, answer.text)


def test_declared_rates_of_an_agent_are_checked_and_a_body_without_them_keeps_them(
    served: tuple[Hub, Tokens],
) -> None:
    hub, tokens = served
    with hub.client(tokens.admin) as admin, hub.client(tokens.agent) as agent:
        body = {"worker_id": "agent-1", "limits": []}
        assert agent.post(
            "/api/workers/register", json={"worker_id": "agent-1", "types": ["mail", "sms"]}
        ).is_success
        for bad in [
            {"rates": [{"scope": "type", "name": "billing", "rate": 2, "period": 1}]},
            {"rates": [{"scope": "queue", "name": "mail", "rate": 2, "period": 1}]},
            {"rates": [{"scope": "type", "name": "mail", "rate": 0, "period": 1}]},
            {"rates": [{"scope": "type", "name": "mail", "rate": True, "period": 1}]},
            {"rates": [{"scope": "type", "name": "mail", "rate": 2, "period": "1"}]},
            {"limits": [{"scope": "type", "name": "mail", "concurrency": True}]},
            {"rates": [{"scope": "type", "name": "mail", "rate": 2, "period": 0}]},
            {"rates": [{"scope": "type", "name": "mail", "rate": 2, "period": 86_401}]},
            {"rates": [{"scope": "type", "name": "mail", "rate": 2}]},
            {"unrated": ["mail", "mail"]},
            {"unrated": ["billing"]},
        ]:
            answer = agent.post("/api/workers/limits", json={**body, **bad})
            assert answer.status_code in (403, 422), (bad, answer.text)
        assert admin.get("/api/limits").json() == {"limits": []}  # nothing was written
        rate = {"scope": "key", "name": "mail", "rate": 3, "period": 0.5}
        made = agent.post("/api/workers/limits", json={**body, "rates": [rate]})
        assert made.json() == {"changed": True, "ignored": []}, made.text
        old_agent = agent.post("/api/workers/limits", json={**body, "unlimited": ["mail"]})
        assert old_agent.json() == {"changed": False, "ignored": []}  # rates left as they are
        rows = admin.get("/api/limits").json()["limits"]
        assert [(r["scope"], r["name"], r["rate"], r["period"], r["source"]) for r in rows] == [
            ("key", "mail", 3, 0.5, "declared")
        ]
        gone = agent.post("/api/workers/limits", json={**body, "rates": [], "unrated": ["mail"]})
        assert gone.json() == {"changed": True, "ignored": []}
        assert admin.get("/api/limits").json() == {"limits": []}
