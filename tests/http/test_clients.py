"""Clients of the two APIs the hub is compatible with, run as their docs write them."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hubproc import Hub, Tokens
from testenv import subprocess_env


@pytest.fixture(scope="module")
def open_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    """The JSON queue's set-up: no tokens (a trusted network), any job type."""
    db = tmp_path_factory.mktemp("open") / "queue.db"
    server = Hub(
        db, "--insecure-no-auth", env=subprocess_env(JOBCORE_ALLOW_UNREGISTERED_TYPES="true")
    )
    yield server
    assert server.terminate() == 0


def curl(script: str, hub: Hub) -> tuple[int, str]:
    """Run one curl example of the docs, pointed at the hub; returns (HTTP status, body)."""
    command = script.replace("http://localhost:3000", hub.url)
    done = subprocess.run(
        f"{command} -s -w '\\n%{{http_code}}'",
        shell=True,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    body, _, status = done.stdout.rpartition("\n")
    return int(status), body


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_json_queue_curl_examples_as_written(open_hub: Hub) -> None:
    assert "insecure-no-auth" in open_hub.output()
    # Add job
    status, body = curl(
        """curl -X POST http://localhost:3000/api/queue \\
  -H "Content-Type: application/json" \\
  -d '{"type": "process_image", "data": {"url": "https://example.com/img.jpg"}}'""",
        open_hub,
    )
    assert status == 201
    added = json.loads(body)
    assert added["status"] == "pending"
    # Get next job (worker)
    status, body = curl("curl http://localhost:3000/api/queue", open_hub)
    assert status == 200
    assert json.loads(body) == {
        "id": added["id"],
        "type": "process_image",
        "data": {"url": "https://example.com/img.jpg"},
    }
    # Complete job
    status, body = curl(
        f"""curl -X PUT http://localhost:3000/api/queue/{added["id"]} \\
  -H "Content-Type: application/json" \\
  -d '{{"status": "completed", "result": {{"processed": true}}}}'""",
        open_hub,
    )
    assert (status, json.loads(body)) == (200, {"success": True})
    job = httpx.get(f"{open_hub.url}/api/jobs/{added['id']}").json()
    assert (job["status"], job["result"]) == ("completed", {"processed": True})
    # Fail job
    _, body = curl(
        """curl -X POST http://localhost:3000/api/queue -H "Content-Type: application/json" \\
  -d '{"type": "process_image", "data": {"url": "x"}}'""",
        open_hub,
    )
    second = json.loads(body)["id"]
    assert curl("curl http://localhost:3000/api/queue", open_hub)[0] == 200
    status, body = curl(
        f"""curl -X PUT http://localhost:3000/api/queue/{second} \\
  -H "Content-Type: application/json" \\
  -d '{{"status": "failed", "error": "Something went wrong"}}'""",
        open_hub,
    )
    assert (status, json.loads(body)) == (200, {"success": True})
    failed = httpx.get(f"{open_hub.url}/api/jobs/{second}").json()
    assert (failed["status"], failed["last_error"]) == ("failed", "Something went wrong")
    # nothing left: 204; a job not claimed: 404
    assert curl("curl http://localhost:3000/api/queue", open_hub)[0] == 204
    assert (
        curl(
            f"""curl -X PUT http://localhost:3000/api/queue/{second} -H "Content-Type: application/json" -d '{{"status": "completed"}}'""",
            open_hub,
        )[0]
        == 404
    )


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"type": "", "data": {}}, 422),
        ({"type": "x" * 101, "data": {}}, 422),
        ({"type": "t"}, 422),
    ],
)
def test_json_queue_validation(open_hub: Hub, body: dict[str, object], status: int) -> None:
    answer = httpx.post(open_hub.url + "/api/queue", json=body)
    assert answer.status_code == status
    assert answer.json()["error"]


@pytest.mark.parametrize("data", ["a string", [1, {"b": 2}], 42, 1.5, True, None, {}])
def test_json_queue_data_may_be_any_json_value(open_hub: Hub, data: object) -> None:
    """The JSON queue accepts any `data` but undefined; a worker gets back exactly what was added."""
    added = httpx.post(open_hub.url + "/api/queue", json={"type": "raw_data", "data": data})
    assert added.status_code == 201, added.text
    claimed = httpx.get(open_hub.url + "/api/queue")
    assert claimed.status_code == 200
    assert claimed.json() == {"id": added.json()["id"], "type": "raw_data", "data": data}
    done = httpx.put(
        open_hub.url + f"/api/queue/{added.json()['id']}", json={"status": "completed"}
    )
    assert done.json() == {"success": True}


def test_json_queue_update_validation(open_hub: Hub) -> None:
    answer = httpx.put(open_hub.url + "/api/queue/x", json={"status": "done"})
    assert answer.status_code == 422
    assert httpx.put(open_hub.url + "/api/queue/x", json={"status": "completed"}).status_code == 404


def test_fleet_hub_agent_flow(hub: Hub, tokens: Tokens) -> None:
    """The fleet hub's producer and agent, with their bodies (one shared bearer secret)."""
    secret = {"Authorization": f"Bearer {tokens.admin}"}
    with httpx.Client(base_url=hub.url, headers=secret, timeout=30) as http:
        created = http.post(
            "/api/jobs",
            json={
                "type": "noop",
                "params": {"sleep": 0},
                "priority": 3,
                "max_attempts": 2,
                "max_runtime_ms": 60000,
            },
        )
        assert created.status_code == 201
        job_id = created.json()["id"]
        assert created.json()["status"] == "pending"
        listed = http.get("/api/jobs", params={"status": "pending", "limit": 50, "offset": 0})
        assert job_id in [job["id"] for job in listed.json()["jobs"]]
        registered = http.post(
            "/api/workers/register",
            json={
                "worker_id": "worker-01",
                "name": "Worker 01",
                "cores": 8,
                "ram_gb": 16,
                "tags": [],
            },
        )
        assert registered.status_code == 200
        claimed = http.post("/api/jobs/claim", json={"worker_id": "worker-01", "types": ["noop"]})
        assert claimed.status_code == 200
        job = claimed.json()
        assert (job["id"], job["worker_id"], job["params"]) == (
            job_id,
            "worker-01",
            {"sleep": 0, "fail": False},
        )
        beat = http.post(f"/api/jobs/{job_id}/heartbeat", json={"worker_id": "worker-01"})
        assert beat.status_code == 200
        result = {"answer": 42}
        digest = hashlib.sha256(json.dumps(result).encode()).hexdigest()
        report = {"worker_id": "worker-01", "result": result, "result_hash": digest}
        done = http.post(
            f"/api/jobs/{job_id}/result", json=report, headers={"X-Idempotency-Key": digest}
        )
        assert done.status_code == 200
        again = http.post(
            f"/api/jobs/{job_id}/result", json=report, headers={"X-Idempotency-Key": digest}
        )
        assert again.status_code == 200
        assert again.json()["status"] == "completed"
        # a failure: re-queued while attempts remain, then quarantined (= failed)
        other = http.post(
            "/api/jobs", json={"type": "noop", "params": {}, "max_attempts": 1}
        ).json()["id"]
        assert (
            http.post("/api/jobs/claim", json={"worker_id": "worker-01", "types": ["noop"]}).json()[
                "id"
            ]
            == other
        )
        failed = http.post(
            f"/api/jobs/{other}/fail", json={"worker_id": "worker-01", "reason": "solver crashed"}
        )
        assert failed.status_code == 200
        assert failed.json()["status"] == "failed"
        assert failed.json()["last_error"] == "solver crashed"
        # cancel by the producer
        doomed = http.post("/api/jobs", json={"type": "noop", "params": {}, "priority": -5}).json()[
            "id"
        ]
        assert http.delete(f"/api/jobs/{doomed}").status_code == 204
        assert http.get(f"/api/jobs/{doomed}").json()["status"] == "cancelled"
        nothing = http.post(
            "/api/jobs/claim", json={"worker_id": "worker-01", "types": ["no-such-type"]}
        )
        assert nothing.status_code == 204


def test_tokens_cli(tmp_path: Path) -> None:
    from hubproc import jobcore

    db = tmp_path / "t.db"
    token = jobcore(
        db, "tokens", "create", "--name", "ci", "--scope", "agent", "--agent", "box-1"
    ).stdout
    assert token.count("\n") == 1 and token.startswith("jch_")
    listed = json.loads(jobcore(db, "tokens", "list", "--json").stdout)
    assert [(t["name"], t["scope"], t["agent_id"]) for t in listed] == [("ci", "agent", "box-1")]
    assert token.strip() not in jobcore(db, "tokens", "list").stdout
    jobcore(db, "tokens", "revoke", "ci")
    again = jobcore(db, "tokens", "revoke", "ci", check=False)
    assert again.returncode == 1 and again.stderr.startswith("Error: no active token")
    jobcore(db, "tokens", "create", "--name", "box-2", "--scope", "agent")
    listed = json.loads(jobcore(db, "tokens", "list", "--json").stdout)
    assert ("box-2", "box-2") in [(t["name"], t["agent_id"]) for t in listed]
    bad = jobcore(
        db, "tokens", "create", "--name", "x", "--scope", "read", "--agent", "y", check=False
    )
    assert bad.returncode == 2
    dup = jobcore(db, "tokens", "create", "--name", "ci", "--scope", "read")
    assert dup.returncode == 0
    clash = jobcore(db, "tokens", "create", "--name", "ci", "--scope", "read", check=False)
    assert clash.returncode == 1 and "exists" in clash.stderr
