"""Every route of DESIGN §11 against a real `jobcore serve`: answers and error codes."""

from __future__ import annotations

import importlib.util
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hubproc import Hub, Tokens

CRON = importlib.util.find_spec("croniter") is not None  # the cron plugin loads


def unique(prefix: str = "q") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def admin(hub: Hub, tokens: Tokens) -> Iterator[httpx.Client]:
    with hub.client(tokens.admin) as client:
        yield client


@pytest.fixture
def agent(hub: Hub, tokens: Tokens) -> Iterator[httpx.Client]:
    with hub.client(tokens.agent) as client:
        yield client


def enqueue(client: httpx.Client, **body: Any) -> dict[str, Any]:
    body.setdefault("type", "noop")
    answer = client.post("/api/jobs", json=body)
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def claim(client: httpx.Client, queue: str, **body: Any) -> httpx.Response:
    return client.post("/api/jobs/claim", json={"worker_id": "agent-1", "queues": [queue], **body})


# -- enqueue --------------------------------------------------------------------------


def test_enqueue_answers_the_job_with_created(admin: httpx.Client) -> None:
    job = enqueue(
        admin, payload={"sleep": 0}, queue=unique(), priority=5, max_attempts=4, timeout=9
    )
    assert job["created"] is True
    assert job["status"] == "pending"
    assert (job["priority"], job["max_attempts"], job["timeout"]) == (5, 4, 9.0)
    assert job["params"] == job["payload"]


def test_enqueue_aliases_of_the_fleet_hub(admin: httpx.Client) -> None:
    job = enqueue(admin, params={"sleep": 0}, max_runtime_ms=1500)
    assert job["payload"]["sleep"] == 0
    assert job["timeout"] == 1.5
    assert job["max_runtime_ms"] == 1500


def test_enqueue_delay_makes_it_scheduled(admin: httpx.Client) -> None:
    assert enqueue(admin, delay="1h")["status"] == "scheduled"
    assert enqueue(admin, run_at="2999-01-01T00:00:00")["status"] == "scheduled"


def test_duplicate_idempotency_key_answers_200_with_the_existing_job(admin: httpx.Client) -> None:
    key = unique("key")
    first = enqueue(admin, idempotency_key=key, queue=unique())
    again = admin.post("/api/jobs", json={"type": "noop"}, headers={"Idempotency-Key": key})
    assert again.status_code == 200
    assert again.json()["created"] is False
    assert again.json()["id"] == first["id"]


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"type": "no_such_type"}, 400, "unknown job type"),
        ({"type": "noop", "payload": {"bogus": 1}}, 400, "bogus"),
        ({"type": "noop", "wat": 1}, 400, "wat: unknown field"),
        ({"type": "noop", "priority": 2**31}, 422, "priority"),
        ({"type": "noop", "priority": "high"}, 422, "priority"),
        ({"type": "noop", "delay": "soon"}, 400, "delay"),
        ({"type": "noop", "delay": -1}, 422, "delay"),
        ({"type": "noop", "run_at": "10000-01-01T00:00:00"}, 422, "run_at"),
        ({"type": "noop", "max_attempts": 0}, 422, "max_attempts"),
        ({"type": "noop", "timeout": 0}, 422, "timeout"),
        ({"type": "noop", "payload": {}, "params": {}}, 400, "not both"),
        ({"type": "noop", "timeout": 1, "max_runtime_ms": 5}, 400, "not both"),
        ({"payload": {}}, 422, "type"),
        (b'{"type": "\\ud800"}', 400, "surrogate"),  # refused before parsing (review9)
        (b'{"type": "record", "payload": {"log": "\\udc00"}}', 400, "UTF-8"),
        ([1, 2], 422, "body"),
    ],
)
def test_bad_enqueues_are_4xx_naming_the_problem(
    admin: httpx.Client, body: Any, status: int, words: str
) -> None:
    if isinstance(body, bytes):
        answer = admin.post("/api/jobs", content=body, headers={"content-type": "application/json"})
    else:
        answer = admin.post("/api/jobs", json=body)
    assert answer.status_code == status, answer.text
    assert words in answer.json()["error"]


def test_bad_json_is_400(admin: httpx.Client) -> None:
    answer = admin.post("/api/jobs", content=b"{nope", headers={"content-type": "application/json"})
    assert answer.status_code == 400
    assert "JSON" in answer.json()["error"]


def test_body_over_max_body_is_413(admin: httpx.Client) -> None:
    answer = admin.post("/api/jobs", content=b"x" * (1024 * 1024 + 1))
    assert answer.status_code == 413
    assert "limit" in answer.json()["error"]

    def chunks() -> Any:
        for _ in range(300):
            yield b"x" * 4096

    chunked = admin.post("/api/jobs", content=chunks())
    assert chunked.status_code == 413


def test_payload_over_max_payload_bytes_is_413(hub: Hub, tokens: Tokens, tmp_path: Any) -> None:
    from hubproc import Hub as Server
    from testenv import subprocess_env

    small = Server(
        tmp_path / "small.db",
        "--insecure-no-auth",
        env=subprocess_env(
            JOBCORE_MAX_PAYLOAD_BYTES="100", JOBCORE_ALLOW_UNREGISTERED_TYPES="true"
        ),
    )
    try:
        with small.client() as client:
            answer = client.post("/api/jobs", json={"type": "x", "payload": {"a": "b" * 200}})
        assert answer.status_code == 413
        assert "max_payload_bytes" in answer.json()["error"]
    finally:
        assert small.terminate() == 0


def test_batch_is_all_or_nothing(admin: httpx.Client) -> None:
    queue = unique()
    good = admin.post("/api/jobs/batch", json={"jobs": [{"type": "noop", "queue": queue}] * 3})
    assert good.status_code == 201
    assert [job["created"] for job in good.json()["jobs"]] == [True] * 3
    bad = admin.post(
        "/api/jobs/batch",
        json={"jobs": [{"type": "noop", "queue": queue}, {"type": "nope", "queue": queue}]},
    )
    assert bad.status_code == 400
    assert "jobs.1" in bad.json()["error"]
    listed = admin.get("/api/jobs", params={"queue": queue}).json()["jobs"]
    assert len(listed) == 3
    assert admin.post("/api/jobs/batch", json={"jobs": []}).status_code == 422


# -- reading ---------------------------------------------------------------------------


def test_list_filters_search_and_cursor_pages(admin: httpx.Client) -> None:
    queue = unique()
    marker = unique("needle")
    ids = [enqueue(admin, queue=queue, payload={"sleep": 0})["id"] for _ in range(5)]
    hit = enqueue(admin, type="record", queue=queue, payload={"log": f"/tmp/{marker}"})["id"]
    page = admin.get("/api/jobs", params={"queue": queue, "limit": 4}).json()
    assert [job["id"] for job in page["jobs"]] == [hit, *reversed(ids)][:4]
    rest = admin.get(
        "/api/jobs", params={"queue": queue, "limit": 4, "cursor": page["next_cursor"]}
    )
    assert [job["id"] for job in rest.json()["jobs"]] == list(reversed(ids))[3:]
    assert rest.json()["next_cursor"] is None
    found = admin.get("/api/jobs", params={"q": marker}).json()["jobs"]
    assert [job["id"] for job in found] == [hit]
    by_type = admin.get("/api/jobs", params={"queue": queue, "type": "record"}).json()["jobs"]
    assert [job["id"] for job in by_type] == [hit]
    waiting = admin.get("/api/jobs", params={"queue": queue, "status": "waiting,pending"})
    assert len(waiting.json()["jobs"]) == 6
    offset = admin.get("/api/jobs", params={"queue": queue, "limit": 2, "offset": 1}).json()
    assert [job["id"] for job in offset["jobs"]] == [ids[4], ids[3]]


@pytest.mark.parametrize(
    ("params", "status"),
    [
        ({"status": "bogus"}, 400),
        ({"limit": 0}, 422),
        ({"limit": 1001}, 422),
        ({"offset": -1}, 422),
    ],
)
def test_bad_list_parameters(admin: httpx.Client, params: dict[str, Any], status: int) -> None:
    answer = admin.get("/api/jobs", params=params)
    assert answer.status_code == status
    assert answer.json()["error"]


def test_get_one_job_and_404(admin: httpx.Client) -> None:
    job = enqueue(admin)
    answer = admin.get(f"/api/jobs/{job['id']}")
    assert answer.status_code == 200
    assert answer.json()["id"] == job["id"]
    assert answer.json()["attempts_detail"] == []
    missing = admin.get("/api/jobs/nope")
    assert missing.status_code == 404
    assert "nope" in missing.json()["error"]


def test_stats_health_and_unknown_route(hub: Hub, admin: httpx.Client) -> None:
    stats = admin.get("/api/stats").json()
    assert set(stats) == {
        "counts",
        "by_type",
        "failures",
        "stuck",
        "durations",
        "last_hour",
        "duplicates",
        "paused",  # DESIGN §16
        "limits",
        *(["schedules"] if CRON else []),  # the cron plugin's (`jobcore_stats`)
    }
    assert httpx.get(hub.url + "/api/health").json() == {"status": "ok"}
    assert admin.get("/api/nothing-here").status_code == 404
    assert admin.get("/api/nothing-here").json()["error"]


def test_openapi_and_docs_need_no_token(hub: Hub) -> None:
    spec = httpx.get(hub.url + "/openapi.json").json()
    for path in (
        "/api/jobs",
        "/api/jobs/batch",
        "/api/jobs/{job_id}",
        "/api/jobs/{job_id}/retry",
        "/api/jobs/retry",
        "/api/jobs/cancel",
        "/api/stats",
        "/api/health",
        "/api/workers/register",
        "/api/workers",
        "/api/jobs/claim",
        "/api/jobs/{job_id}/heartbeat",
        "/api/jobs/{job_id}/result",
        "/api/jobs/{job_id}/fail",
        "/api/events",
        "/api/jobs/events",
        "/api/queue",
        "/api/queue/{job_id}",
    ):
        assert path in spec["paths"], path
    assert httpx.get(hub.url + "/docs").status_code == 200


# -- operator transitions -----------------------------------------------------------------


def test_cancel_and_retry_one_job(admin: httpx.Client) -> None:
    job = enqueue(admin, queue=unique())
    assert admin.delete(f"/api/jobs/{job['id']}").status_code == 204
    assert admin.get(f"/api/jobs/{job['id']}").json()["status"] == "cancelled"
    again = admin.delete(f"/api/jobs/{job['id']}")
    assert again.status_code == 409
    assert "cancelled" in again.json()["error"]
    retried = admin.post(f"/api/jobs/{job['id']}/retry")
    assert retried.status_code == 200
    assert retried.json()["status"] == "pending"
    not_failed = admin.post(f"/api/jobs/{job['id']}/retry")
    assert not_failed.status_code == 409
    assert admin.delete("/api/jobs/nope").status_code == 404
    assert admin.post("/api/jobs/nope/retry").status_code == 404


def test_bulk_cancel_and_retry_by_filter(admin: httpx.Client) -> None:
    queue = unique()
    for _ in range(4):
        enqueue(admin, queue=queue)
    cancelled = admin.post("/api/jobs/cancel", json={"queue": queue})
    assert cancelled.json() == {"matched": 4, "changed": 4}
    retried = admin.post("/api/jobs/retry", json={"queue": [queue], "status": "cancelled"})
    assert retried.json() == {"matched": 4, "changed": 4}
    nothing = admin.post("/api/jobs/retry", json={"queue": queue})
    assert nothing.json() == {"matched": 0, "changed": 0}
    pending_only = admin.post("/api/jobs/retry", json={"queue": queue, "status": "pending"})
    assert pending_only.json() == {"matched": 4, "changed": 0}
    unknown = admin.post("/api/jobs/cancel", json={"queue": queue, "colour": "red"})
    assert unknown.status_code == 400
    assert "colour" in unknown.json()["error"]


def test_a_filter_naming_too_many_types_or_queues_is_400(admin: httpx.Client) -> None:
    """Tens of thousands of names (a comma list in one body) were handed to the store,
    whose query then failed: 503 `too many SQL variables`, as if the store were down."""
    queue = unique()
    job = enqueue(admin, queue=queue, delay=3600)
    names = ",".join(f"t{i}" for i in range(40_000))
    for body, named in (
        ({"type": names, "queue": queue}, "type: at most 1000 names"),
        ({"type": "noop", "queue": [queue, names]}, "queue: at most 1000 names"),
    ):
        for action in ("cancel", "retry"):
            answer = admin.post(f"/api/jobs/{action}", json=body)
            assert answer.status_code == 400, answer.text
            assert named in answer.json()["error"], answer.text
    assert admin.get(f"/api/jobs/{job['id']}").json()["status"] == "scheduled"
    assert admin.delete(f"/api/jobs/{job['id']}").status_code == 204


# -- agents -------------------------------------------------------------------------------


def test_register_and_workers_registry(agent: httpx.Client, admin: httpx.Client) -> None:
    answer = agent.post(
        "/api/workers/register",
        json={
            "worker_id": "agent-1",
            "name": "box",
            "cores": 8,
            "ram_gb": 16,
            "tags": ["gpu"],
            "types": ["noop"],
        },
    )
    assert answer.status_code == 200
    intervals = answer.json()
    assert intervals["lease"] == 30 and intervals["heartbeat_interval"] == 7.5
    assert intervals["poll_wait"] > 0
    workers = admin.get("/api/workers").json()["workers"]
    mine = next(w for w in workers if w["worker_id"] == "agent-1")
    assert (mine["cores"], mine["tags"], mine["state"]) == (8, ["gpu"], "idle")


def test_claim_heartbeat_result_flow(agent: httpx.Client, admin: httpx.Client) -> None:
    queue = unique()
    job = enqueue(admin, queue=queue)
    claimed = claim(agent, queue)
    assert claimed.status_code == 200
    body = claimed.json()
    assert body["id"] == job["id"] and body["status"] == "claimed"
    assert body["lease_id"] and body["lease_expires_at"]
    beat = agent.post(
        f"/api/jobs/{job['id']}/heartbeat",
        json={"worker_id": "agent-1", "lease_id": body["lease_id"], "progress": {"pct": 50}},
    )
    assert beat.status_code == 200
    assert beat.json()["cancel_requested"] is False
    assert beat.json()["lease_expires_at"]
    workers = admin.get("/api/workers").json()["workers"]
    mine = next(w for w in workers if w["worker_id"] == "agent-1")
    assert mine["current_jobs"] == [job["id"]]
    assert mine["progress"] == {job["id"]: {"pct": 50}}
    report = {"worker_id": "agent-1", "lease_id": body["lease_id"], "result": {"ok": True}}
    done = agent.post(f"/api/jobs/{job['id']}/result", json=report)
    assert done.status_code == 200
    assert done.json()["status"] == "completed"
    assert done.json()["result"] == {"ok": True}
    repeat = agent.post(f"/api/jobs/{job['id']}/result", json=report)
    assert repeat.status_code == 200
    assert repeat.json()["status"] == "completed"
    late_beat = agent.post(
        f"/api/jobs/{job['id']}/heartbeat",
        json={"worker_id": "agent-1", "lease_id": body["lease_id"]},
    )
    assert late_beat.status_code == 409
    detail = admin.get(f"/api/jobs/{job['id']}").json()["attempts_detail"]
    assert [(a["attempt"], a["worker"], a["outcome"]) for a in detail] == [
        (1, "agent-1", "completed")
    ]


def test_claim_returns_an_array_with_max_jobs_and_204_when_empty(
    agent: httpx.Client, admin: httpx.Client
) -> None:
    queue = unique()
    for _ in range(3):
        enqueue(admin, queue=queue)
    many = claim(agent, queue, max_jobs=2)
    assert many.status_code == 200
    assert len(many.json()) == 2
    assert len(claim(agent, queue, max_jobs=5).json()) == 1
    assert claim(agent, queue).status_code == 204


def test_fail_retries_then_fails_with_the_policy(agent: httpx.Client, admin: httpx.Client) -> None:
    queue = unique()
    job = enqueue(admin, queue=queue, max_attempts=2)
    first = claim(agent, queue).json()
    failed = agent.post(
        f"/api/jobs/{job['id']}/fail",
        json={"worker_id": "agent-1", "reason": "boom", "retry_in": 0},
    )
    assert failed.status_code == 200
    assert failed.json()["status"] in ("pending", "scheduled")
    assert failed.json()["last_error"] == "boom"
    second = claim(agent, queue, wait=5).json()
    assert second["attempts"] == 2 and second["lease_id"] != first["lease_id"]
    final = agent.post(
        f"/api/jobs/{job['id']}/fail",
        json={"worker_id": "agent-1", "lease_id": second["lease_id"], "reason": "boom again"},
    )
    assert final.json()["status"] == "failed"
    stale = agent.post(
        f"/api/jobs/{job['id']}/result",
        json={"worker_id": "agent-1", "lease_id": first["lease_id"]},
    )
    assert stale.status_code == 409


def test_not_retryable_fails_at_once(agent: httpx.Client, admin: httpx.Client) -> None:
    queue = unique()
    job = enqueue(admin, queue=queue)
    claim(agent, queue)
    answer = agent.post(
        f"/api/jobs/{job['id']}/fail",
        json={"worker_id": "agent-1", "reason": "bad input", "retryable": False},
    )
    assert answer.json()["status"] == "failed"


def test_result_with_children_and_release(agent: httpx.Client, admin: httpx.Client) -> None:
    queue = unique()
    job = enqueue(admin, queue=queue)
    lease = claim(agent, queue).json()["lease_id"]
    done = agent.post(
        f"/api/jobs/{job['id']}/result",
        json={
            "worker_id": "agent-1",
            "lease_id": lease,
            "children": [{"type": "noop", "queue": queue}],
        },
    )
    assert done.status_code == 200
    child = claim(agent, queue).json()
    assert child["parent_id"] == job["id"]
    released = agent.post(
        f"/api/jobs/{child['id']}/release",
        json={"worker_id": "agent-1", "lease_id": child["lease_id"]},
    )
    assert released.status_code == 200
    assert released.json()["status"] == "pending"
    assert released.json()["attempts"] == 0
    other = enqueue(admin, queue=queue)
    assert len(claim(agent, queue, max_jobs=5).json()) == 2
    bad_child = agent.post(
        f"/api/jobs/{other['id']}/result",
        json={"worker_id": "agent-1", "children": [{"type": "noop"}, {"type": "nope"}]},
    )
    assert bad_child.status_code == 400
    assert "children.1" in bad_child.json()["error"]
    assert admin.get(f"/api/jobs/{other['id']}").json()["status"] == "claimed"


def test_agent_routes_refuse_other_claims(agent: httpx.Client, admin: httpx.Client) -> None:
    queue = unique()
    job = enqueue(admin, queue=queue)
    lease = admin.post(
        "/api/jobs/claim", json={"worker_id": "someone-else", "queues": [queue]}
    ).json()["lease_id"]
    for route in ("heartbeat", "result", "fail"):
        answer = agent.post(f"/api/jobs/{job['id']}/{route}", json={"worker_id": "agent-1"})
        assert answer.status_code == 409, route
        assert "someone-else" in answer.json()["error"]
    wrong_lease = admin.post(
        f"/api/jobs/{job['id']}/result", json={"worker_id": "someone-else", "lease_id": "0" * 32}
    )
    assert wrong_lease.status_code == 409
    right = admin.post(
        f"/api/jobs/{job['id']}/result", json={"worker_id": "someone-else", "lease_id": lease}
    )
    assert right.status_code == 200
    assert agent.post("/api/jobs/nope/heartbeat", json={"worker_id": "agent-1"}).status_code == 404


def test_result_over_max_result_bytes_is_413(agent: httpx.Client) -> None:
    answer = agent.post(
        "/api/jobs/whatever/result", json={"worker_id": "agent-1", "result": "x" * 300_000}
    )
    assert answer.status_code == 413


def test_cancel_requested_reaches_the_heartbeat(agent: httpx.Client, admin: httpx.Client) -> None:
    queue = unique()
    job = enqueue(admin, queue=queue)
    lease = claim(agent, queue).json()["lease_id"]
    assert admin.delete(f"/api/jobs/{job['id']}").status_code == 204
    beat = agent.post(
        f"/api/jobs/{job['id']}/heartbeat", json={"worker_id": "agent-1", "lease_id": lease}
    )
    assert beat.json()["cancel_requested"] is True


def test_drain_tells_the_agent_to_stop(hub: Hub, tokens: Tokens, admin: httpx.Client) -> None:
    with hub.client(tokens.admin) as client:
        client.post("/api/workers/register", json={"worker_id": "drainer"})
        assert client.post("/api/workers/drainer/drain").status_code == 204
        answer = client.post("/api/jobs/claim", json={"worker_id": "drainer"})
        assert answer.status_code == 204
        assert answer.headers["X-Jobcore-Drain"] == "1"
        client.post("/api/workers/register", json={"worker_id": "drainer"})
        assert (
            "X-Jobcore-Drain"
            not in client.post(
                "/api/jobs/claim", json={"worker_id": "drainer", "queues": [unique()]}
            ).headers
        )
        assert client.post("/api/workers/nobody/drain").status_code == 404


def test_tokens_routes(admin: httpx.Client) -> None:
    name = unique("tok")
    made = admin.post("/api/tokens", json={"name": name, "scope": "produce"})
    assert made.status_code == 201
    assert made.json()["token"].startswith("jch_")
    assert admin.post("/api/tokens", json={"name": name, "scope": "read"}).status_code == 409
    assert admin.post("/api/tokens", json={"name": unique(), "scope": "root"}).status_code == 422
    listed = admin.get("/api/tokens").json()["tokens"]
    assert any(t["name"] == name for t in listed)
    assert all("token" not in t and "hash" not in t for t in listed)
    assert admin.delete(f"/api/tokens/{name}").status_code == 204
    assert admin.delete(f"/api/tokens/{name}").status_code == 404


def test_search_pages_through_windows_to_an_old_match(hub: Hub, admin: httpx.Client) -> None:
    import jobcore_test_plugin

    from jobcore import Config, Queue, make_plugin_manager

    marker = unique("old-needle")
    pm = make_plugin_manager(plugins=(("test", jobcore_test_plugin),))
    with Queue(str(hub.db), config=Config(env={}), pm=pm) as queue:
        old = queue.enqueue("record", {"log": f"/tmp/{marker}"}).job.id
        queue.enqueue_many("noop", [{} for _ in range(12_000)])
    found: list[str] = []
    cursor = None
    pages = 0
    while True:
        params = {"q": marker, "limit": 10, **({"cursor": cursor} if cursor else {})}
        page = admin.get("/api/jobs", params=params).json()
        found.extend(job["id"] for job in page["jobs"])
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert found == [old]
    statuses = admin.get("/api/jobs", params={"status": "pending,cancelled", "limit": 5}).json()
    ids = [job["id"] for job in statuses["jobs"]]
    assert ids == sorted(ids, reverse=True) and len(ids) == 5
