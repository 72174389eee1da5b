"""Many producers and JSON-queue workers share the hub's group commit, on either store.

Each request is answered only once its write is durable (a hub killed with SIGKILL
right after the answers has every acknowledged job), a write that fails inside a shared
commit fails its own request alone, idempotency keys still give one job per key, and the
JSON queue's GET/PUT loop (read, check and record in one round of the writer) keeps its
answers.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw
import httpx
import pytest
from hubproc import Hub, jobcore

CLIENTS = 16


@dataclass
class Running:
    hub: Hub
    admin: str
    db: Path | str

    def client(self, token: str | None = None) -> httpx.Client:
        return self.hub.client(token or self.admin)


def _token(db: Path | str, name: str, scope: str, *more: str) -> str:
    return jobcore(db, "tokens", "create", "--name", name, "--scope", scope, *more).stdout.strip()


@pytest.fixture
def running(store_db: Path | str, tmp_path: Path) -> Iterator[Running]:
    hub = Hub(store_db, "--lease", "30s", logs=tmp_path)
    try:
        yield Running(hub, _token(store_db, "admin", "admin"), store_db)
    finally:
        if hub.proc.poll() is None:
            assert hub.terminate() == 0, hub.output()


def _stored(run: Running, ids: set[str]) -> set[str]:
    """Which of `ids` the store holds, asked of the hub."""
    with run.client() as client:
        return {i for i in ids if client.get(f"/api/jobs/{i}").status_code == 200}


def test_every_acknowledged_enqueue_survives_sigkill(running: Running, tmp_path: Path) -> None:
    """16 producers (single jobs, keyed jobs, batches) while the hub is killed with SIGKILL:
    every job whose request was answered 2xx is in the store after a restart."""
    acked: set[str] = set()
    lock = threading.Lock()
    killed = threading.Event()

    def produce(index: int) -> None:
        with running.client() as client:
            for n in range(10_000):
                try:
                    if n % 3 == 0:
                        body = {"jobs": [{"type": "noop", "queue": "q"} for _ in range(3)]}
                        answer = client.post("/api/jobs/batch", json=body)
                        ids = (
                            [job["id"] for job in answer.json()["jobs"]]
                            if answer.is_success
                            else []
                        )
                    else:
                        key = {"idempotency_key": f"k{index}-{n}"} if n % 3 == 1 else {}
                        answer = client.post(
                            "/api/jobs", json={"type": "noop", "queue": "q", **key}
                        )
                        ids = [answer.json()["id"]] if answer.is_success else []
                except httpx.HTTPError:
                    return  # the hub is gone
                assert answer.is_success or killed.is_set(), answer.text
                with lock:
                    acked.update(ids)
                    if len(acked) >= 600 and not killed.is_set():
                        killed.set()
                        running.hub.kill()  # SIGKILL, right after these answers
                if killed.is_set():
                    return

    with ThreadPoolExecutor(CLIENTS) as pool:
        list(pool.map(produce, range(CLIENTS)))
    assert killed.is_set() and running.hub.proc.returncode == -signal.SIGKILL
    running.hub = Hub(running.db, "--lease", "30s", logs=tmp_path)
    assert _stored(running, acked) == acked


def _poison(db: Path | str) -> None:
    """A trigger in the store refusing any job of queue `poison` at insert (after every
    check of the hub and the library: it fails inside the hub's commit)."""
    if isinstance(db, Path):
        conn = apsw.Connection(str(db))
        conn.set_busy_timeout(10_000)
        conn.execute(
            "CREATE TRIGGER poison BEFORE INSERT ON jobs WHEN NEW.queue = 'poison' "
            "BEGIN SELECT RAISE(ABORT, 'poisoned job'); END"
        )
        conn.close()
        return
    import psycopg

    url, _, schema = db.partition("?schema=")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            f"CREATE FUNCTION {schema}.poison() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF NEW.queue = 'poison' THEN RAISE EXCEPTION 'poisoned job'; END IF; "
            "RETURN NEW; END $$"
        )
        conn.execute(
            f"CREATE TRIGGER poison BEFORE INSERT ON {schema}.jobs "
            f"FOR EACH ROW EXECUTE FUNCTION {schema}.poison()"
        )


def test_a_failing_write_in_a_shared_commit_fails_its_own_request_alone(
    running: Running,
) -> None:
    _poison(running.db)
    good: list[str] = []
    refused: list[int] = []
    lock = threading.Lock()

    def produce(index: int) -> None:
        with running.client() as client:
            for n in range(40):
                poisoned = index % 4 == 0 and n % 2 == 0
                body: dict[str, Any] = {"type": "noop", "queue": "poison" if poisoned else "ok"}
                if n % 5 == 4:  # a batch: all or nothing
                    answer = client.post("/api/jobs/batch", json={"jobs": [body, body]})
                else:
                    answer = client.post("/api/jobs", json=body)
                with lock:
                    if poisoned:
                        refused.append(answer.status_code)
                        assert set(answer.json()) == {"error"}, answer.text
                    else:
                        assert answer.is_success, answer.text
                        data = answer.json()
                        good.extend(j["id"] for j in data.get("jobs", [data]))

    with ThreadPoolExecutor(CLIENTS) as pool:
        list(pool.map(produce, range(CLIENTS)))
    assert refused and all(status >= 400 for status in refused)
    # 12 clients send 40 good requests (8 of them batches of 2), 4 send 20 (4 batches)
    assert len(good) == len(set(good)) == 12 * (40 + 8) + 4 * (20 + 4)
    with running.client() as client:
        assert client.get("/api/jobs", params={"queue": "poison"}).json()["jobs"] == []
    assert _stored(running, set(good)) == set(good)


def test_racing_producers_of_one_idempotency_key_get_one_job(running: Running) -> None:
    barrier = threading.Barrier(CLIENTS)

    def produce(index: int) -> list[tuple[int, str, bool]]:
        got = []
        with running.client() as client:
            for n in range(15):
                barrier.wait(30)
                header = {"Idempotency-Key": f"key-{n}"} if index % 2 else {}
                body = (
                    {"type": "noop"}
                    if index % 2
                    else {"type": "noop", "idempotency_key": f"key-{n}"}
                )
                answer = client.post("/api/jobs", json=body, headers=header)
                assert answer.status_code in (200, 201), answer.text
                job = answer.json()
                got.append((n, job["id"], job["created"]))
                assert (answer.status_code == 201) == job["created"]
        return got

    with ThreadPoolExecutor(CLIENTS) as pool:
        answers = [item for items in pool.map(produce, range(CLIENTS)) for item in items]
    for n in range(15):
        mine = [(job_id, created) for key, job_id, created in answers if key == n]
        assert len(mine) == CLIENTS
        assert len({job_id for job_id, _ in mine}) == 1, mine
        assert sum(created for _, created in mine) == 1, mine


def test_json_queue_loop_answers(running: Running) -> None:
    w1 = _token(running.db, "w1", "agent", "--agent", "w1")
    w2 = _token(running.db, "w2", "agent", "--agent", "w2")
    with running.client() as admin, running.client(w1) as one, running.client(w2) as two:
        added = admin.post("/api/queue", json={"type": "noop", "data": {}})
        assert added.status_code == 201, added.text
        pending = admin.post("/api/jobs", json={"type": "noop", "queue": "later"}).json()["id"]
        assert two.put(f"/api/queue/{pending}", json={"status": "completed"}).json() == {
            "error": f"job {pending} is not claimed (it is pending)"
        }
        assert one.put("/api/queue/nope", json={"status": "completed"}).status_code == 404
        job = one.get("/api/queue").json()
        assert job["id"] == added.json()["id"] and job["type"] == "noop"
        other = two.put(f"/api/queue/{job['id']}", json={"status": "completed"})
        assert other.status_code == 409
        assert other.json() == {"error": f"job {job['id']} is claimed by 'w1', not 'w2'"}
        done = one.put(f"/api/queue/{job['id']}", json={"status": "completed", "result": 7})
        assert done.status_code == 200 and done.json() == {"success": True}
        again = one.put(f"/api/queue/{job['id']}", json={"status": "completed"})
        assert again.status_code == 404
        assert again.json() == {"error": f"job {job['id']} is not claimed (it is completed)"}
        stored = admin.get(f"/api/jobs/{job['id']}").json()
        assert stored["status"] == "completed" and stored["result"] == 7
        assert admin.delete(f"/api/jobs/{pending}").status_code == 204
        assert one.get("/api/queue").status_code == 204
        admin.post("/api/jobs", json={"type": "noop", "max_attempts": 1})
        failing = one.get("/api/queue").json()
        failed = one.put(f"/api/queue/{failing['id']}", json={"status": "failed", "error": "bad"})
        assert failed.json() == {"success": True}
        stored = admin.get(f"/api/jobs/{failing['id']}").json()
        assert stored["status"] == "failed" and stored["last_error"] == "bad"


def test_json_queue_loop_of_four_workers_completes_each_job_once(running: Running) -> None:
    tokens = [_token(running.db, f"w{i}", "agent", "--agent", f"w{i}") for i in range(4)]
    with running.client() as admin:
        body = {"jobs": [{"type": "noop"} for _ in range(200)]}
        ids = {job["id"] for job in admin.post("/api/jobs/batch", json=body).json()["jobs"]}

    def work(token: str) -> list[str]:
        done = []
        with running.client(token) as client:
            while True:
                answer = client.get("/api/queue")
                if answer.status_code == 204:
                    return done
                job_id = answer.json()["id"]
                put = client.put(f"/api/queue/{job_id}", json={"status": "completed"})
                assert put.json() == {"success": True}, put.text
                done.append(job_id)

    with ThreadPoolExecutor(4) as pool:
        done = [job_id for got in pool.map(work, tokens) for job_id in got]
    assert sorted(done) == sorted(ids)
    with running.client() as admin:
        for job_id in ids:
            job = admin.get(f"/api/jobs/{job_id}").json()
            assert job["status"] == "completed" and job["attempts"] == 1
