"""SIGTERM: waiting long-polls answer, event streams end with a retry hint, exit 0."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from hubproc import Hub, free_port, jobcore, make_tokens


def test_sigterm_ends_long_polls_and_streams_and_exits_0(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    hub = Hub(db)
    tokens = make_tokens(hub, db)

    def long_poll() -> int:
        with hub.client(tokens.agent, timeout=60) as client:
            answer = client.post("/api/jobs/claim", json={"worker_id": "agent-1", "wait": 30})
            return answer.status_code

    def stream() -> str:
        with (
            hub.client(tokens.read, timeout=60) as client,
            client.stream("GET", "/api/events") as answer,
        ):
            return "".join(answer.iter_text())

    with ThreadPoolExecutor(2) as pool:
        polled = pool.submit(long_poll)
        streamed = pool.submit(stream)
        time.sleep(1.0)
        started = time.monotonic()
        code = hub.terminate(timeout=30)
        assert polled.result(10) == 204
        text = streamed.result(10)
    assert code == 0, hub.output()
    assert time.monotonic() - started < 10
    assert text.startswith("retry: ")
    assert text.rstrip().splitlines()[-1].startswith(": the hub is shutting down")
    assert "retry: " in text.strip().split("\n\n")[-1]
    # the hub is gone; a new one on the same database starts cleanly
    again = Hub(db)
    assert httpx.get(again.url + "/api/health").status_code == 200
    assert again.terminate() == 0


def test_a_taken_port_is_one_clear_error(tmp_path: Path) -> None:
    import socket

    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen(1)
        done = jobcore(tmp_path / "jobs.db", "serve", "--port", str(port), check=False)
    assert done.returncode == 1
    assert (
        done.stderr.strip().splitlines()[-1].startswith(f"Error: cannot listen on 127.0.0.1:{port}")
    )


def test_health_is_503_when_the_store_does_not_answer(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "jobs.db"
    hub = Hub(db, "--insecure-no-auth")
    try:
        assert httpx.get(hub.url + "/api/health").json() == {"status": "ok"}
        with sqlite3.connect(db) as other:  # the hub's own tables vanish under it
            other.execute("DROP TABLE hub_migrations")
        answer = httpx.get(hub.url + "/api/health")
        assert answer.status_code == 503
        # anyone may ask: no path or driver detail in the answer; the hub's log has it
        assert answer.json() == {"status": "unavailable"}
        assert str(db) not in answer.text
        assert "health check: the store does not answer" in hub.output()
    finally:
        assert hub.terminate() == 0


def test_a_bad_setting_is_one_clear_error(tmp_path: Path) -> None:
    from testenv import subprocess_env

    done = jobcore(
        tmp_path / "jobs.db", "serve", env=subprocess_env(JOBCORE_HTTP_PORT="eighty"), check=False
    )
    assert done.returncode == 1
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith("Error: bad setting 'port' from JOBCORE_HTTP_PORT")
    )
    bad_size = jobcore(tmp_path / "jobs.db", "serve", "--max-body", "lots", check=False)
    assert bad_size.returncode == 2


def test_requests_in_flight_at_sigterm_are_answered_and_kept(tmp_path: Path) -> None:
    import sqlite3
    import threading

    db = tmp_path / "jobs.db"
    hub = Hub(db, "--insecure-no-auth")
    acknowledged: list[str] = []
    problems: list[str] = []
    lock = threading.Lock()

    def produce() -> None:
        with httpx.Client(base_url=hub.url, timeout=20) as client:
            while True:
                try:
                    answer = client.post("/api/jobs", json={"type": "noop"})
                except (httpx.ConnectError, httpx.RemoteProtocolError):
                    return  # the hub stopped accepting: fine
                except httpx.TimeoutException as exc:
                    problems.append(f"no answer: {exc!r}")
                    return
                if answer.status_code == 201:
                    with lock:
                        acknowledged.append(answer.json()["id"])
                elif answer.status_code != 503:
                    problems.append(f"{answer.status_code} {answer.text}")

    with ThreadPoolExecutor(16) as pool:
        for _ in range(16):
            pool.submit(produce)
        time.sleep(1.0)
        assert hub.terminate(timeout=30) == 0
    assert problems == []
    assert acknowledged
    with sqlite3.connect(db) as conn:
        stored = {row[0] for row in conn.execute("SELECT id FROM jobs")}
    assert set(acknowledged) <= stored  # every 201 was committed
