"""Tokens limited to job types and queues (`tokens create --types … --queues …`), against a
real `jobcore serve`: every route that enqueues or acts on jobs answers 403 naming the type
or queue, writes nothing, and a limited agent claims only its types and queues."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from hubproc import Hub, Tokens, jobcore
from testenv import subprocess_env

SHELL = {"type": "shell", "payload": {"argv": ["true"]}}


def make(db: Path, name: str, scope: str, *options: str) -> str:
    """A token made by the CLI, as an operator would."""
    return jobcore(
        db, "tokens", "create", "--name", name, "--scope", scope, *options
    ).stdout.strip()


def grant(hub: Hub, tokens: Tokens, name: str, scope: str, **limits: list[str]) -> str:
    """A token made over HTTP (`POST /api/tokens`), quicker than a CLI process."""
    with hub.client(tokens.admin) as admin:
        made = admin.post("/api/tokens", json={"name": name, "scope": scope, **limits})
    assert made.status_code == 201, made.text
    token: str = made.json()["token"]
    return token


def enqueue(client: httpx.Client, **job: Any) -> httpx.Response:
    return client.post("/api/jobs", json=job)


def listed(admin: httpx.Client, **filters: str) -> list[dict[str, Any]]:
    answer = admin.get("/api/jobs", params={"limit": 1000, **filters})
    assert answer.status_code == 200, answer.text
    jobs: list[dict[str, Any]] = answer.json()["jobs"]
    return jobs


@pytest.fixture(scope="module")
def partner(hub: Hub, hub_db: Path) -> str:
    """A produce token for `noop` and `record` jobs in the queue `partner` only."""
    return make(hub_db, "partner", "produce", "--types", "noop,record", "--queues", "partner")


def test_a_limited_token_enqueues_only_its_types_and_queues(
    hub: Hub, tokens: Tokens, partner: str
) -> None:
    with hub.client(partner) as client, hub.client(tokens.admin) as admin:
        for body, named in (
            ({**SHELL, "queue": "partner"}, "'shell'"),
            ({"type": "exec", "payload": {"url": "http://x/y", "sha256": "0" * 64}}, "'exec'"),
            ({"type": "noop"}, "'default'"),  # the queue a job gets when it names none
            ({"type": "noop", "queue": "other"}, "'other'"),
        ):
            answer = client.post("/api/jobs", json=body)
            assert answer.status_code == 403, answer.text
            assert named in answer.json()["error"] and "partner" in answer.json()["error"]
        assert listed(admin, type="shell") == [] and listed(admin, queue="other") == []
        made = enqueue(client, type="noop", queue="partner")
        assert made.status_code == 201, made.text
        assert made.json()["type"] == "noop" and made.json()["queue"] == "partner"


def test_one_forbidden_job_refuses_the_whole_batch(hub: Hub, tokens: Tokens, partner: str) -> None:
    jobs = [
        {"type": "noop", "queue": "partner", "payload": {}},
        {**SHELL, "queue": "partner"},
        {"type": "record", "queue": "partner", "payload": {"log": "/dev/null"}},
    ]
    with hub.client(partner) as client, hub.client(tokens.admin) as admin:
        before = len(listed(admin, queue="partner"))
        answer = client.post("/api/jobs/batch", json={"jobs": jobs})
        assert answer.status_code == 403, answer.text
        assert answer.json()["error"].startswith("jobs.1: ")
        assert "'shell'" in answer.json()["error"]
        assert len(listed(admin, queue="partner")) == before
        del jobs[1]
        assert client.post("/api/jobs/batch", json={"jobs": jobs}).status_code == 201
        assert len(listed(admin, queue="partner")) == before + 2


def test_the_json_queue_add_is_limited_too(hub: Hub, hub_db: Path, tokens: Tokens) -> None:
    token = grant(hub, tokens, "json-noop", "produce", types=["noop"])
    with hub.client(token) as client, hub.client(tokens.admin) as admin:
        answer = client.post("/api/queue", json={"type": "shell", "data": {"command": "id"}})
        assert answer.status_code == 403 and "'shell'" in answer.json()["error"]
        assert listed(admin, type="shell") == []
        assert client.post("/api/queue", json={"type": "noop", "data": {}}).status_code == 201
    queued = grant(hub, tokens, "json-queue", "produce", queues=["partner"])
    with hub.client(queued) as client:  # the JSON queue's jobs go to their default queue
        answer = client.post("/api/queue", json={"type": "noop", "data": {}})
        assert answer.status_code == 403 and "'default'" in answer.json()["error"]


def test_cancel_and_retry_of_one_job_need_its_type_and_queue(
    hub: Hub, tokens: Tokens, partner: str
) -> None:
    with hub.client(partner) as client, hub.client(tokens.admin) as admin:
        shell = enqueue(admin, **SHELL, queue="partner", delay=3600).json()
        other = enqueue(admin, type="noop", queue="other", delay=3600).json()
        mine = enqueue(admin, type="noop", queue="partner", delay=3600).json()
        for job, named in ((shell, "'shell'"), (other, "'other'")):
            answer = client.delete(f"/api/jobs/{job['id']}")
            assert answer.status_code == 403 and named in answer.json()["error"], answer.text
            assert admin.get(f"/api/jobs/{job['id']}").json()["status"] == "scheduled"
            assert admin.delete(f"/api/jobs/{job['id']}").status_code == 204
            answer = client.post(f"/api/jobs/{job['id']}/retry")
            assert answer.status_code == 403 and named in answer.json()["error"], answer.text
            assert admin.get(f"/api/jobs/{job['id']}").json()["status"] == "cancelled"
        assert client.delete(f"/api/jobs/{mine['id']}").status_code == 204
        assert client.post(f"/api/jobs/{mine['id']}/retry").status_code == 200
        assert client.delete("/api/jobs/no-such-job").status_code == 404


def test_bulk_filters_must_stay_within_the_token(hub: Hub, tokens: Tokens, partner: str) -> None:
    with hub.client(partner) as client, hub.client(tokens.admin) as admin:
        shell = enqueue(admin, **SHELL, queue="partner", delay=3600).json()
        mine = enqueue(admin, type="noop", queue="partner", delay=3600).json()
        for body, named in (
            ({"status": "scheduled"}, "name them"),
            ({"queue": "partner"}, "types noop, record"),  # every type of the queue: refused
            ({"type": "noop"}, "queues partner"),  # every queue of the type: refused
            ({"type": ["noop", "shell"], "queue": "partner"}, "'shell'"),
            ({"type": "noop", "queue": "partner,other"}, "'other'"),
        ):
            answer = client.post("/api/jobs/cancel", json=body)
            assert answer.status_code == 403, (body, answer.text)
            assert named in answer.json()["error"], (body, answer.text)
        assert admin.get(f"/api/jobs/{shell['id']}").json()["status"] == "scheduled"
        answer = client.post("/api/jobs/cancel", json={"type": "noop", "queue": "partner"})
        assert answer.status_code == 200 and answer.json()["changed"] >= 1
        assert admin.get(f"/api/jobs/{mine['id']}").json()["status"] == "cancelled"
        assert admin.get(f"/api/jobs/{shell['id']}").json()["status"] == "scheduled"
        answer = client.post("/api/jobs/retry", json={"type": "shell", "queue": "partner"})
        assert answer.status_code == 403
        assert (
            client.post("/api/jobs/retry", json={"type": "record,noop", "queue": "partner"}).json()[
                "changed"
            ]
            >= 1
        )
        assert admin.get(f"/api/jobs/{mine['id']}").json()["status"] == "pending"


def test_a_limited_agent_claims_only_its_types_and_queues(
    hub: Hub, hub_db: Path, tokens: Tokens
) -> None:
    token = grant(hub, tokens, "lim-agent", "agent", types=["noop"], queues=["lim-a", "lim-b"])
    me = {"worker_id": "lim-agent"}
    with hub.client(token) as agent, hub.client(tokens.admin) as admin:
        shell = enqueue(admin, **SHELL, queue="lim-a").json()
        elsewhere = enqueue(admin, type="noop", queue="lim-c").json()
        ok = enqueue(admin, type="noop", queue="lim-b").json()
        answer = agent.post("/api/jobs/claim", json={**me, "types": ["shell"]})
        assert answer.status_code == 403 and "'shell'" in answer.json()["error"]
        answer = agent.post("/api/jobs/claim", json={**me, "queues": ["lim-c"]})
        assert answer.status_code == 403 and "'lim-c'" in answer.json()["error"]
        # asking for more (or for anything) is narrowed to the token's types and queues
        claimed = agent.post(
            "/api/jobs/claim", json={**me, "types": ["shell", "noop"], "max_jobs": 10}
        )
        assert [job["id"] for job in claimed.json()] == [ok["id"]]
        assert agent.post("/api/jobs/claim", json=me).status_code == 204
        for job in (shell, elsewhere):
            assert admin.get(f"/api/jobs/{job['id']}").json()["status"] == "pending"
        # what it enqueues with a result is limited the same way: refused, still claimed
        lease = claimed.json()[0]["lease_id"]
        answer = agent.post(
            f"/api/jobs/{ok['id']}/result",
            json={**me, "lease_id": lease, "children": [{**SHELL, "queue": "lim-a"}]},
        )
        assert answer.status_code == 403 and answer.json()["error"].startswith("children.0: ")
        assert admin.get(f"/api/jobs/{ok['id']}").json()["status"] == "claimed"
        assert [job["id"] for job in listed(admin, type="shell", queue="lim-a")] == [shell["id"]]
        child = {"type": "noop", "queue": "lim-a"}
        answer = agent.post(
            f"/api/jobs/{ok['id']}/result", json={**me, "lease_id": lease, "children": [child]}
        )
        assert answer.status_code == 200, answer.text
        for job in (shell, elsewhere):
            assert admin.delete(f"/api/jobs/{job['id']}").status_code == 204


def test_the_json_queue_claim_of_a_limited_agent(hub: Hub, hub_db: Path, tokens: Tokens) -> None:
    token = grant(hub, tokens, "lim-json", "agent", queues=["lim-json"])
    with hub.client(token) as agent, hub.client(tokens.admin) as admin:
        other = enqueue(admin, type="noop", queue="lim-json-other").json()
        mine = enqueue(admin, type="noop", queue="lim-json").json()
        assert agent.get("/api/queue").json()["id"] == mine["id"]
        assert agent.get("/api/queue").status_code == 204
        assert admin.get(f"/api/jobs/{other['id']}").json()["status"] == "pending"
        assert admin.delete(f"/api/jobs/{other['id']}").status_code == 204


def test_limits_are_listed_by_the_cli_and_the_api(hub: Hub, hub_db: Path, tokens: Tokens) -> None:
    make(hub_db, "listed", "produce", "--types", " noop , record,noop", "--queues", "a")
    with hub.client(tokens.admin) as admin:
        made = admin.post(
            "/api/tokens",
            json={"name": "listed-api", "scope": "agent", "types": ["noop"], "queues": None},
        )
        assert made.status_code == 201, made.text
        assert made.json()["types"] == ["noop"] and made.json()["queues"] is None
        over_http = {t["name"]: t for t in admin.get("/api/tokens").json()["tokens"]}
    as_json = {t["name"]: t for t in json.loads(jobcore(hub_db, "tokens", "list", "--json").stdout)}
    for found in (over_http, as_json):
        assert found["listed"]["types"] == ["noop", "record"]
        assert found["listed"]["queues"] == ["a"]
        assert found["listed-api"]["types"] == ["noop"] and found["listed-api"]["queues"] is None
        assert found["admin"]["types"] is None and found["admin"]["queues"] is None
    text = jobcore(hub_db, "tokens", "list").stdout
    assert re.search(r"^listed\s+produce\s+noop,record\s+a\s", text, re.M), text
    assert re.search(r"^admin\s+admin\s+\*\s+\*\s", text, re.M), text


def test_bad_limits_are_one_error_line_and_no_token(hub: Hub, hub_db: Path) -> None:
    for options, named in (
        (("--scope", "produce", "--types", "noop,,record"), "--types: an empty name"),
        (("--scope", "produce", "--queues", "a\tb"), "--queues: 'a\\tb' is not a name"),
        (("--scope", "produce", "--types", "creat_file"), "--types: unknown job type"),
        (("--scope", "read", "--types", "noop"), "'read' token changes no job"),
    ):
        done = jobcore(hub_db, "tokens", "create", "--name", "refused", *options, check=False)
        assert done.returncode == 1, done.stderr
        assert done.stdout == ""
        assert done.stderr.count("\n") == 1 and done.stderr.startswith("Error: "), done.stderr
        assert named in done.stderr, done.stderr
    names = [t["name"] for t in json.loads(jobcore(hub_db, "tokens", "list", "--json").stdout)]
    assert "refused" not in names


def test_bad_limits_over_http_are_400(hub: Hub, tokens: Tokens) -> None:
    with hub.client(tokens.admin) as admin:
        for body, named in (
            ({"types": []}, "types: give at least one name"),
            ({"types": ["noop", ""]}, "types: an empty name"),
            ({"types": ["no op"]}, "types: 'no op' is not a name"),
            ({"queues": ["a,b"]}, "queues: 'a,b' is not a name"),
            ({"queues": ["x" * 201]}, "is not a name"),
            ({"types": ["creat_file"]}, "types: unknown job type 'creat_file'"),
            ({"scope": "read", "types": ["noop"]}, "a 'read' token changes no job"),
            ({"scope": "admin", "queues": ["q"]}, "an unlimited one"),
        ):
            answer = admin.post("/api/tokens", json={"name": "bad", "scope": "produce", **body})
            assert answer.status_code == 400, (body, answer.text)
            assert named in answer.json()["error"], (body, answer.text)
        assert "bad" not in [t["name"] for t in admin.get("/api/tokens").json()["tokens"]]


def test_a_hub_of_unregistered_types_accepts_any_well_formed_name(tmp_path: Path) -> None:
    env = subprocess_env(JOBCORE_ALLOW_UNREGISTERED_TYPES="true")
    db = tmp_path / "jobs.db"
    made = jobcore(
        db, "tokens", "create", "--name", "p", "--scope", "produce", "--types", "solve.v2", env=env
    )
    assert made.stdout.strip().startswith("jch_")
    done = jobcore(
        db, "tokens", "create", "--name", "q", "--scope", "produce", "--types", "a,,b",
        env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 1 and "empty name" in done.stderr


def test_an_old_store_upgrades_and_its_tokens_keep_full_rights(tmp_path: Path) -> None:
    """A store whose hub tables predate limits: the hub adds them; old tokens stay unlimited."""
    import hashlib

    import apsw
    from jobcore_http.store import _MIGRATIONS

    from jobcore.testing import make_queue

    db = tmp_path / "old.db"
    make_queue(str(db)).close()  # the jobs schema
    old = "jch_made-before-limits"
    before = [name for name, _ in _MIGRATIONS].index("hub_tokens_limits")
    conn = apsw.Connection(str(db))
    with conn:
        conn.execute("CREATE TABLE hub_migrations (name TEXT PRIMARY KEY, applied_at INTEGER)")
        for name, script in _MIGRATIONS[:before]:
            conn.execute(script)
            conn.execute("INSERT INTO hub_migrations VALUES (?, 0)", (name,))
        conn.execute(
            "INSERT INTO hub_tokens (name, hash, scope, created_at) VALUES ('old', ?, 'produce', 0)",
            (hashlib.sha256(old.encode()).hexdigest(),),
        )
    conn.close()
    server = Hub(db)
    try:
        with server.client(old) as client:
            shell = client.post("/api/jobs", json={**SHELL, "queue": "any", "delay": 3600})
            assert shell.status_code == 201, shell.text
            assert client.post("/api/queue", json={"type": "noop", "data": {}}).status_code == 201
            assert client.delete(f"/api/jobs/{shell.json()['id']}").status_code == 204
            assert client.post(f"/api/jobs/{shell.json()['id']}/retry").status_code == 200
            answer = client.post("/api/jobs/cancel", json={"type": "shell"})
            assert answer.status_code == 200 and answer.json()["changed"] == 1
    finally:
        assert server.terminate() == 0, server.output()
    [token] = json.loads(jobcore(db, "tokens", "list", "--json").stdout)
    assert token["name"] == "old" and token["types"] is None and token["queues"] is None


def test_the_dashboard_acts_only_within_the_token(hub: Hub, tokens: Tokens, partner: str) -> None:
    with hub.client(tokens.admin) as admin, hub.client() as browser:
        shell = enqueue(admin, **SHELL, queue="partner", delay=3600).json()
        mine = enqueue(admin, type="noop", queue="partner", delay=3600).json()
        signed_in = browser.post("/ui/login", data={"token": partner, "next": "/ui/jobs"})
        assert signed_in.status_code == 303, signed_in.text
        page = browser.get("/ui/jobs")
        assert "types noop, record; queues partner" in page.text
        csrf = {"csrf_token": re.findall(r'name="csrf_token" value="([^"]+)"', page.text)[0]}
        refused = browser.post(f"/ui/jobs/{shell['id']}/cancel", data=csrf)
        assert refused.status_code == 403 and "type &#39;shell&#39;" in refused.text
        for flt in (
            {"type": "shell", "queue": "partner"},
            {"queue": "partner"},
            {"type": "noop"},
            {"status": "scheduled"},
        ):
            answer = browser.post("/ui/bulk", data={**csrf, "action": "cancel", **flt})
            assert answer.status_code == 403, (flt, answer.text)
            confirm = browser.get("/ui/bulk", params={"action": "cancel", **flt})
            assert confirm.status_code == 403, (flt, confirm.text)
        answer = browser.post("/ui/dead-letters/retry", data={**csrf, "signature": "x"})
        assert answer.status_code == 403
        assert admin.get(f"/api/jobs/{shell['id']}").json()["status"] == "scheduled"
        assert browser.post(f"/ui/jobs/{mine['id']}/cancel", data=csrf).status_code == 303
        assert admin.get(f"/api/jobs/{mine['id']}").json()["status"] == "cancelled"
        flt = {"type": "noop", "queue": "partner"}
        assert browser.get("/ui/bulk", params={"action": "retry", **flt}).status_code == 200
        answer = browser.post("/ui/bulk", data={**csrf, "action": "retry", **flt})
        assert answer.status_code == 303
        assert admin.get(f"/api/jobs/{mine['id']}").json()["status"] == "pending"
        assert admin.delete(f"/api/jobs/{shell['id']}").status_code == 204


PRE_LIMITS_LOOKUP = (  # how a hub older than limits finds the token of a request
    "SELECT name, hash, scope, agent_id, created_at, revoked_at FROM hub_tokens "
    "WHERE hash = ? AND revoked_at IS NULL"
)


def test_a_hub_older_than_limits_finds_no_limited_token(
    hub: Hub, hub_db: Path, tokens: Tokens
) -> None:
    """An old hub still running on (or started again on) an upgraded store ignores the
    limits columns: it must not find a limited token at all, rather than grant it any job."""
    import hashlib

    import apsw

    limited = make(hub_db, "old-hub-limited", "produce", "--types", "noop")
    unlimited = make(hub_db, "old-hub-open", "produce")
    conn = apsw.Connection(str(hub_db))
    try:
        for token, found in ((limited, []), (unlimited, ["old-hub-open"])):
            digest = hashlib.sha256(token.encode()).hexdigest()
            assert [row[0] for row in conn.execute(PRE_LIMITS_LOOKUP, (digest,))] == found
        with hub.client(limited) as client:  # this hub knows the token and its limits
            made = client.post("/api/jobs", json={"type": "noop", "delay": 3600})
            assert made.status_code == 201, made.text
            assert client.post("/api/jobs", json=SHELL).status_code == 403
            # a row marked limited whose limits were lost allows nothing, never anything
            with conn:
                conn.execute(
                    "UPDATE hub_tokens SET types = NULL, queues = NULL WHERE name = ?",
                    ("old-hub-limited",),
                )
            answer = client.post("/api/jobs", json={"type": "noop", "delay": 3600})
            assert answer.status_code == 403, answer.text
            assert client.post("/api/jobs", json=SHELL).status_code == 403
            assert client.delete(f"/api/jobs/{made.json()['id']}").status_code == 403
    finally:
        conn.close()
    with hub.client(tokens.admin) as admin:
        assert admin.delete(f"/api/jobs/{made.json()['id']}").status_code == 204
