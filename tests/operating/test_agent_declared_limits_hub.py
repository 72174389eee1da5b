"""`POST /api/workers/limits` through a real `jobcore serve` on SQLite and PostgreSQL
(DESIGN §16): an agent writes the limits its job types declare, as a worker does at start,
and nothing more: only types it registered, only `declared` limits (type or key), never over
a limit set at run time; bad input is refused and writes nothing."""

from __future__ import annotations

from typing import Any

import httpx
from hubproc import Hub, Tokens
from jobcore_http.routes.limits import named_twice

AGENT = {"worker_id": "agent-1"}


def _limits(admin: httpx.Client) -> list[tuple[str, str, int, str]]:
    rows = admin.get("/api/limits").json()["limits"]
    return [(r["scope"], r["name"], r["concurrency"], r["source"]) for r in rows]


def _declare(agent: httpx.Client, *limits: tuple[str, str, Any], **body: Any) -> httpx.Response:
    made = [{"scope": s, "name": n, "concurrency": c} for s, n, c in limits]
    return agent.post("/api/workers/limits", json={**AGENT, "limits": made, **body})


def test_an_agent_declares_the_limits_of_its_registered_types_only(
    served: tuple[Hub, Tokens],
) -> None:
    hub, tokens = served
    with hub.client(tokens.admin) as admin, hub.client(tokens.agent) as agent:
        unregistered = _declare(agent, ("type", "mail", 2))
        assert unregistered.status_code == 409, unregistered.text
        assert "POST /api/workers/register first" in unregistered.json()["error"]
        registered = agent.post(
            "/api/workers/register", json={**AGENT, "types": ["mail", "scan", "sms"]}
        )
        assert registered.status_code == 200, registered.text
        bad: list[tuple[Any, ...]] = [
            (("type", "billing", 2),),  # not one of its types
            (("queue", "mail", 2),),  # queues are limited at run time only
            (("type", "mail", 0),),
            (("type", "mail", -1),),
            (("type", "mail", 10**7),),
            (("type", "mail", 1.5),),
            (("type", "mail", "two"),),
            (("type", "mail", None),),
            (("type", "mail", 2), ("key", "mail", 1)),  # one limit per type
        ]
        for limits in bad:
            answer = _declare(agent, *limits)
            assert answer.status_code in (403, 422), (limits, answer.text)
            assert answer.json()["error"], answer.text
        refused = _declare(agent, ("type", "billing", 2))
        assert refused.status_code == 403
        assert "did not register type 'billing'" in refused.json()["error"]
        assert _declare(agent, unlimited=["mail", "billing"]).status_code == 403
        assert _limits(admin) == []  # nothing written by any of these
        # a limit set at run time wins over the declared one, as with workers
        assert admin.put("/api/types/scan/limit", json={"concurrency": 7}).status_code == 200
        made = _declare(agent, ("type", "mail", 2), ("key", "scan", 1), ("type", "sms", 3))
        assert made.status_code == 200, made.text
        assert made.json() == {"changed": True, "ignored": []}
        assert _limits(admin) == [
            ("key", "scan", 1, "declared"),
            ("type", "mail", 2, "declared"),
            ("type", "scan", 7, "set"),
            ("type", "sms", 3, "declared"),
        ]
        again = _declare(agent, ("type", "mail", 2), ("key", "scan", 1), ("type", "sms", 3))
        assert again.json() == {"changed": False, "ignored": []}  # no write when nothing changes
        # a new version of the types: mail's limit changes, sms declares none any more
        assert _declare(agent, ("type", "mail", 4), unlimited=["sms", "scan"]).status_code == 200
        assert _limits(admin) == [("type", "mail", 4, "declared"), ("type", "scan", 7, "set")]


def test_a_token_limited_to_some_types_declares_only_theirs(served: tuple[Hub, Tokens]) -> None:
    hub, tokens = served
    with hub.client(tokens.admin) as admin:
        made = admin.post(
            "/api/tokens",
            json={"name": "narrow", "scope": "agent", "agent_id": "narrow", "types": ["noop"]},
        )
        assert made.status_code == 201, made.text
        with hub.client(made.json()["token"]) as agent:
            me = {"worker_id": "narrow"}
            register = agent.post("/api/workers/register", json={**me, "types": ["noop", "record"]})
            assert register.status_code == 200
            limits = [
                {"scope": "type", "name": "noop", "concurrency": 2},
                {"scope": "type", "name": "record", "concurrency": 1},
            ]
            answer = agent.post("/api/workers/limits", json={**me, "limits": limits})
            assert answer.status_code == 200, answer.text
            assert answer.json() == {"changed": True, "ignored": ["record"]}
            other = agent.post("/api/workers/limits", json={**AGENT, "limits": limits})
            assert other.status_code == 403  # another agent's worker id
        assert _limits(admin) == [("type", "noop", 2, "declared")]


def _rates(admin: httpx.Client) -> list[tuple[str, str, int, float, str]]:
    rows = admin.get("/api/limits").json()["limits"]
    return [
        (r["scope"], r["name"], r["rate"], r["period"], r["source"])
        for r in rows
        if r.get("rate") is not None
    ]


def _rate(scope: str, name: str, rate: Any, period: Any) -> dict[str, Any]:
    return {"scope": scope, "name": name, "rate": rate, "period": period}


def test_an_agent_declares_the_rate_limits_of_its_registered_types_only(
    served: tuple[Hub, Tokens],
) -> None:
    hub, tokens = served
    with hub.client(tokens.admin) as admin, hub.client(tokens.agent) as agent:
        registered = agent.post(
            "/api/workers/register", json={**AGENT, "types": ["mail", "scan", "sms"]}
        )
        assert registered.status_code == 200, registered.text
        bad: list[dict[str, Any]] = [
            {"rates": [_rate("type", "billing", 5, 1)]},  # not one of its types
            {"unrated": ["billing"]},
            {"rates": [_rate("queue", "mail", 5, 1)]},  # queues are limited at run time only
            {"rates": [_rate("type", "mail", 0, 1)]},
            {"rates": [_rate("type", "mail", -1, 1)]},
            {"rates": [_rate("type", "mail", 10**7, 1)]},
            {"rates": [_rate("type", "mail", 1.5, 1)]},
            {"rates": [_rate("type", "mail", "five", 1)]},
            {"rates": [_rate("type", "mail", 5, 0)]},
            {"rates": [_rate("type", "mail", 5, -1)]},
            {"rates": [_rate("type", "mail", 5, 86401)]},
            {"rates": [_rate("type", "mail", 5, None)]},
            {"rates": [_rate("type", "mail", 5, "1m")]},
            {"rates": [_rate("type", "mail", 5, 1), _rate("key", "mail", 1, 1)]},
            {"rates": [_rate("type", "mail", 5, 1)], "unrated": ["mail"]},
            # a good concurrency limit with a bad rate: neither is written
            {"limits": [{"scope": "type", "name": "sms", "concurrency": 2}], "rates": [{}]},
        ]
        for body in bad:
            answer = agent.post("/api/workers/limits", json={**AGENT, **body})
            assert answer.status_code in (403, 422), (body, answer.text)
            assert answer.json()["error"], answer.text
        for text in ('"period": Infinity', '"period": NaN'):
            raw = '{"worker_id": "agent-1", "rates": [{"scope": "type", "name": "mail", '
            raw += f'"rate": 5, {text}}}]}}'
            answer = agent.post(
                "/api/workers/limits", content=raw, headers={"content-type": "application/json"}
            )
            assert answer.status_code in (400, 422), (text, answer.text)
        assert _limits(admin) == [] and _rates(admin) == []  # nothing written by any of these
        # a rate set at run time wins over the declared one, as with workers
        assert admin.put("/api/types/scan/limit", json={"rate": 9, "period": 2}).status_code == 200
        body = {
            "rates": [_rate("type", "mail", 50, 60), _rate("key", "scan", 1, 1)],
            "unrated": ["sms"],
            "limits": [{"scope": "type", "name": "sms", "concurrency": 3}],
        }
        made = agent.post("/api/workers/limits", json={**AGENT, **body})
        assert made.status_code == 200, made.text
        assert made.json() == {"changed": True, "ignored": []}
        assert _rates(admin) == [
            ("key", "scan", 1, 1.0, "declared"),
            ("type", "mail", 50, 60.0, "declared"),
            ("type", "scan", 9, 2.0, "set"),
        ]
        assert [row for row in _limits(admin) if row[2] is not None] == [
            ("type", "sms", 3, "declared")
        ]
        again = agent.post("/api/workers/limits", json={**AGENT, **body})
        assert again.json() == {"changed": False, "ignored": []}  # no write when nothing changes
        # an older agent (no `rates`, no `unrated`) leaves the declared rates as they are
        old = _declare(agent, ("type", "sms", 3))
        assert old.status_code == 200 and old.json()["changed"] is False, old.text
        assert len(_rates(admin)) == 3
        # a new version of the types: mail's rate changes, scan declares none any more
        newer = {"rates": [_rate("type", "mail", 20, 5)], "unrated": ["scan", "sms"]}
        assert agent.post("/api/workers/limits", json={**AGENT, **newer}).status_code == 200
        assert _rates(admin) == [
            ("type", "mail", 20, 5.0, "declared"),
            ("type", "scan", 9, 2.0, "set"),
        ]


def test_a_token_limited_to_some_types_declares_only_their_rates(
    served: tuple[Hub, Tokens],
) -> None:
    hub, tokens = served
    with hub.client(tokens.admin) as admin:
        made = admin.post(
            "/api/tokens",
            json={"name": "narrow", "scope": "agent", "agent_id": "narrow", "types": ["noop"]},
        )
        assert made.status_code == 201, made.text
        with hub.client(made.json()["token"]) as agent:
            me = {"worker_id": "narrow"}
            register = agent.post("/api/workers/register", json={**me, "types": ["noop", "record"]})
            assert register.status_code == 200
            rates = [_rate("type", "noop", 10, 1), _rate("type", "record", 1, 1)]
            answer = agent.post("/api/workers/limits", json={**me, "rates": rates})
            assert answer.status_code == 200, answer.text
            assert answer.json() == {"changed": True, "ignored": ["record"]}
            assert agent.post("/api/workers/limits", json={**me, "unrated": ["record"]}).json() == {
                "changed": False,
                "ignored": ["record"],
            }
        assert _rates(admin) == [("type", "noop", 10, 1.0, "declared")]


def test_a_type_named_twice_is_refused_and_nothing_is_written(served: tuple[Hub, Tokens]) -> None:
    hub, tokens = served
    with hub.client(tokens.admin) as admin, hub.client(tokens.agent) as agent:
        names = [f"t{n:04d}" for n in range(1000)]
        limits = [{"scope": "type", "name": name, "concurrency": 2} for name in names]
        rates = [{"scope": "type", "name": name, "rate": 5, "period": 1} for name in names]
        for body in (
            {"limits": limits, "unlimited": ["t0999", "t0500"]},
            {"rates": rates, "unrated": ["t0999", "t0500"]},
        ):
            answer = agent.post("/api/workers/limits", json={**AGENT, **body})
            assert answer.status_code == 422, answer.text
            assert answer.json()["error"] == (
                "type 't0500' is named twice; give each type once"  # the first, sorted
            )
        assert admin.get("/api/limits").json() == {"limits": []}


class _Name(str):
    """A type name that counts how often it is compared for equality."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        _Name.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_the_duplicate_check_is_one_pass_over_the_names() -> None:
    names = [_Name(f"t{n:04d}") for n in range(2000)] + [_Name("t1999"), _Name("t0007")]
    _Name.compared = 0
    assert named_twice(names) == "t0007"
    assert named_twice(names[:2000]) is None
    assert _Name.compared <= 2 * len(names)  # each name looked up once, not against all
