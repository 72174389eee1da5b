"""Hostile input to a real hub on PostgreSQL: NUL in names, ids and filters is a 400 with
nothing written; an unhealthy store's health answer names no URL; a slow search keeps its
time budget.

Before the fix each of these was a 503 ("text fields cannot contain NUL") on
PostgreSQL and accepted on SQLite; one rule now refuses them on both stores
(tests/http/test_hostile_values.py is the SQLite side).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from testenv import wait_for

pytest.importorskip("jobcore_http", reason="the hub plugin (jobcore_http) is not here")
sys.path.insert(0, str(Path(__file__).parents[1] / "http"))

from hubproc import BIG, NEEDLE, NUL_BODIES, NUL_URLS, Hub, search_pages

from jobcore import Queue


@pytest.fixture
def pg_hub(pg_url: str, tmp_path: Path) -> Iterator[Hub]:
    hub = Hub(pg_url, "--insecure-no-auth", log=tmp_path / "hub.log")
    try:
        yield hub
    finally:
        assert hub.terminate() == 0, hub.output()[-3000:]


def test_nul_in_names_ids_and_filters_is_400_on_postgresql(pg_hub: Hub) -> None:
    with pg_hub.client() as client:
        for path, body in NUL_BODIES:
            answer = client.post(path, json=body)
            assert answer.status_code == 400, (path, body, answer.text)
            assert "NUL" in answer.json()["error"], answer.text
        for url in NUL_URLS:
            answer = client.get(url)
            assert answer.status_code == 400, (url, answer.text)
        assert client.delete("/api/jobs/a%00b").status_code == 400
        assert client.get("/api/jobs").json()["jobs"] == []  # nothing written
        # payloads and results are JSON: NUL round-trips there, as on SQLite
        job = client.post("/api/jobs", json={"type": "record", "payload": {"log": "a\x00b"}})
        assert job.status_code == 201, job.text
        assert client.get(f"/api/jobs/{job.json()['id']}").json()["payload"]["log"] == "a\x00b"
        claimed = client.post("/api/jobs/claim", json={"worker_id": "w1", "types": ["record"]})
        assert claimed.status_code == 200, claimed.text
        lease = claimed.json()["lease_id"]
        done = client.post(
            f"/api/jobs/{job.json()['id']}/result",
            json={"worker_id": "w1", "lease_id": lease, "result": {"out": "x\x00y"}},
        )
        assert done.status_code == 200, done.text
        assert done.json()["result"] == {"out": "x\x00y"}


def test_health_says_unavailable_without_the_store_url(
    pg_hub: Hub, pg_url: str, pg_schema: str
) -> None:
    """Before: 503 `{"status": "unavailable", "error": "PostgreSQL at postgresql://…"}`
    to anyone (no token needed); the detail belongs in the hub's log."""
    import psycopg

    assert httpx.get(pg_hub.url + "/api/health", timeout=10).status_code == 200
    with psycopg.connect(pg_url.split("?")[0], autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {pg_schema} CASCADE")
    answer = httpx.get(pg_hub.url + "/api/health", timeout=30)
    assert answer.status_code == 503, answer.text
    assert answer.json() == {"status": "unavailable"}
    assert wait_for(lambda: "health check: the store does not answer" in pg_hub.output())


def test_a_slow_search_stops_at_its_budget_on_postgresql(pg_hub: Hub, idle_queue: Queue) -> None:
    """Before: PostgreSQL's search ignored its budget (one statement over every row)."""
    made = idle_queue.enqueue_many("record", [{"log": BIG} for _ in range(16)], queue="budget")
    match = idle_queue.enqueue("record", {"log": BIG + NEEDLE}, queue="budget").job.id
    assert len(made) == 16
    with pg_hub.client() as reader:
        found, pages, first = search_pages(reader, q=NEEDLE, queue="budget", limit=50)
    assert found == [match]
    assert first is not None and pages >= 2, (pages, first)


def test_a_key_over_the_stores_byte_limit_is_400_on_postgresql(pg_hub: Hub) -> None:
    """1,000 CJK characters pass the hub's 1,000-character check but are 3,000 bytes, over
    PostgreSQL's btree entry limit: a 400 naming the field, not a 503."""
    key = "漢" * 1000
    with pg_hub.client() as client:
        answer = client.post(
            "/api/jobs", json={"type": "record", "payload": {"log": "x"}, "idempotency_key": key}
        )
        assert answer.status_code == 400, answer.text
        assert "idempotency_key is 3000 bytes" in answer.json()["error"]
        header = client.post(  # read as latin-1: 1,000 characters, 2,000 bytes of UTF-8
            "/api/jobs",
            json={"type": "record", "payload": {"log": "x"}},
            headers={"Idempotency-Key": b"\xe9" * 1000},
        )
        assert header.status_code == 400, header.text
        assert "idempotency_key is 2000 bytes" in header.json()["error"]
        fine = client.post("/api/jobs", json={"type": "record", "payload": {"log": "x"}})
        assert fine.status_code == 201, fine.text
        batch = client.post(
            "/api/jobs/batch",
            json={
                "jobs": [
                    {"type": "record", "payload": {"log": "x"}, "queue": "漢" * 200},
                    {"type": "record", "payload": {"log": "x"}, "idempotency_key": key},
                ]
            },
        )
        assert batch.status_code == 400, batch.text
        assert len(client.get("/api/jobs").json()["jobs"]) == 1  # the batch wrote nothing
