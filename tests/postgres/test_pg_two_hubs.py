"""Two `jobcore serve` hubs on one PostgreSQL store: jobs flow through both, event streams resume
on either."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from jobcore_postgres.storage import PostgresStorage
from testenv import subprocess_env, wait_for

pytest.importorskip("jobcore_http", reason="the hub plugin (jobcore_http) is not here")
pytest.importorskip("jobcore_agent", reason="the agent plugin (jobcore_agent) is not here")
httpx = pytest.importorskip("httpx")

JOBCORE = [sys.executable, "-m", "jobcore"]


def _jobcore(db: str, *args: str) -> str:
    done = subprocess.run(
        [*JOBCORE, "--db", db, *args],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


class Process:
    def __init__(self, args: list[str], log: Path) -> None:
        self.log_path = log
        with open(log, "wb") as handle:
            self.proc = subprocess.Popen(args, env=subprocess_env(), stdout=handle, stderr=handle)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_hub(db: str, tmp: Path, name: str) -> tuple[Process, str]:
    log = tmp / f"{name}.log"
    hub = Process([*JOBCORE, "--db", db, "serve", "--host", "127.0.0.1", "--port", "0"], log)

    def announced() -> str | None:
        assert hub.proc.poll() is None, hub.log()
        match = re.search(
            r"listening on (http://127\.0\.0\.1:\d+)", log.read_text(errors="replace")
        )
        return match.group(1) if match else None

    url: str = wait_for(announced, timeout=60)
    wait_for(lambda: httpx.get(f"{url}/api/health", timeout=2).status_code == 200, timeout=30)
    return hub, url


@pytest.fixture
def processes() -> Iterator[list[Process]]:
    started: list[Process] = []
    yield started
    for process in reversed(started):
        process.stop()


@pytest.mark.slow
def test_jobs_flow_through_two_hubs_sharing_one_database(
    pg_url: str, tmp_path: Path, processes: list[Process]
) -> None:
    storage = PostgresStorage(pg_url)
    storage.migrate()
    hubs = []
    for name in ("hub1", "hub2"):
        hub, url = start_hub(pg_url, tmp_path, name)
        processes.append(hub)
        hubs.append(url)
    admin = _jobcore(pg_url, "tokens", "create", "--name", "admin", "--scope", "admin")
    for index, url in enumerate(hubs, start=1):
        token_file = tmp_path / f"agent{index}.token"
        token = _jobcore(
            pg_url,
            "tokens",
            "create",
            "--name",
            f"agent{index}",
            "--scope",
            "agent",
            "--agent",
            f"agent{index}",
        )
        token_file.write_text(token + "\n")
        processes.append(
            Process(
                [
                    *JOBCORE,
                    "--db",
                    str(tmp_path / f"agent{index}.db"),
                    "agent",
                    "--hub",
                    url,
                    "--token-file",
                    str(token_file),
                    "--worker-id",
                    f"agent{index}",
                    "--cache-dir",
                    str(tmp_path / f"cache{index}"),
                ],
                tmp_path / f"agent{index}.log",
            )
        )
    total = 40
    ids: list[str] = []
    for i in range(total):  # half through each hub, admitted by a token made at either
        with httpx.Client(base_url=hubs[i % 2], timeout=30) as client:
            response = client.post(
                "/api/jobs",
                json={"type": "noop", "payload": {"sleep": 0.05}},
                headers={"Authorization": f"Bearer {admin}"},
            )
        assert response.status_code in (200, 201), response.text
        ids.append(response.json()["id"])

    def finished() -> bool:
        return storage.count_by_status() == {"completed": total}

    try:
        wait_for(finished, timeout=120)
    except AssertionError:
        pytest.fail("\n".join(p.log() for p in processes))
    jobs: list[Any] = [storage.get(job_id) for job_id in ids]
    assert all(job is not None and len(job.history) == 1 for job in jobs)  # each ran once
    by_agent = Counter(job.locked_by for job in jobs)
    assert set(by_agent) == {"agent1", "agent2"}, by_agent  # both hubs handed out work
    storage.close()


def _sse(url: str, token: str, last_event_id: int, count: int) -> list[tuple[int, str]]:
    """(id, data's worker_id) of the first `count` events after `last_event_id`."""
    got: list[tuple[int, str]] = []
    fields: dict[str, str] = {}
    headers = {"Authorization": f"Bearer {token}", "Last-Event-ID": str(last_event_id)}
    with httpx.stream("GET", f"{url}/api/events", headers=headers, timeout=10) as answer:
        assert answer.status_code == 200, answer.read()
        for line in answer.iter_lines():
            if line == "" and "id" in fields:
                got.append((int(fields["id"]), json.loads(fields["data"])["worker_id"]))
                if len(got) == count:
                    break
            if line == "":
                fields = {}
            elif not line.startswith(":"):
                name, _, value = line.partition(":")
                fields[name] = value.removeprefix(" ")
    return got


@pytest.mark.slow
def test_a_stream_resumed_on_the_other_hub_gets_an_event_with_a_smaller_seq(
    pg_url: str, tmp_path: Path, processes: list[Process]
) -> None:
    """The older transaction commits the greater seq: a stream that got it resumes, on
    the other hub, with `Last-Event-ID` = that seq and still gets the smaller one."""
    storage = PostgresStorage(pg_url)
    storage.migrate()
    older = PostgresStorage(pg_url)
    urls = []
    for name in ("hub1", "hub2"):
        hub, url = start_hub(pg_url, tmp_path, name)
        processes.append(hub)
        urls.append(url)
    token = _jobcore(pg_url, "tokens", "create", "--name", "reader", "--scope", "read")
    has_id, fast_done, done = threading.Event(), threading.Event(), threading.Event()
    slow: list[int] = []

    def older_transaction() -> None:
        with older.transaction():
            with older._connection() as conn:
                conn.execute("SELECT pg_current_xact_id()")
            has_id.set()
            assert fast_done.wait(30)
            slow.append(older.add_event("worker:lost", worker_id="slow"))
        done.set()

    thread = threading.Thread(target=older_transaction)
    thread.start()
    try:
        assert has_id.wait(30)
        fast = storage.add_event("worker:lost", worker_id="fast")
        fast_done.set()
        assert done.wait(30)
        [(first, who)] = _sse(urls[0], token, 0, 1)
        assert (first, who) == (slow[0], "slow") and slow[0] > fast
        assert _sse(urls[1], token, first, 1) == [(fast, "fast")]
    finally:
        fast_done.set()
        thread.join(30)
        older.close()
        storage.close()


@pytest.mark.slow
def test_a_stream_read_across_an_open_transaction_resumes_on_the_other_hub_without_loss(
    pg_url: str, tmp_path: Path, processes: list[Process]
) -> None:
    """An event inserted (smaller seq) but not yet committed while a later one commits:
    a stream reading meanwhile, resumed on the other hub, gets both."""
    storage = PostgresStorage(pg_url)
    storage.migrate()
    slow_writer = PostgresStorage(pg_url)
    urls = []
    for name in ("hub1", "hub2"):
        hub, url = start_hub(pg_url, tmp_path, name)
        processes.append(hub)
        urls.append(url)
    token = _jobcore(pg_url, "tokens", "create", "--name", "reader", "--scope", "read")
    start = storage.add_event("worker:registered", worker_id="start")
    inserted, commit = threading.Event(), threading.Event()

    def slow_transaction() -> None:
        with slow_writer.transaction():
            slow_writer.add_event("worker:lost", worker_id="slow")
            inserted.set()
            assert commit.wait(30)

    thread = threading.Thread(target=slow_transaction)
    thread.start()
    try:
        assert inserted.wait(30)
        storage.add_event("worker:lost", worker_id="fast")  # a greater seq, committed first
        with ThreadPoolExecutor(1) as pool:
            reading = pool.submit(_sse, urls[0], token, start, 1)
            time.sleep(1.0)  # the stream is reading while the slow transaction is open
            commit.set()
            thread.join(30)
            got = reading.result(60)
        got += _sse(urls[1], token, got[-1][0], 1)
        assert sorted(who for _, who in got) == ["fast", "slow"]
    finally:
        commit.set()
        thread.join(30)
        slow_writer.close()
        storage.close()
