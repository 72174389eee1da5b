"""Review of the PostgreSQL store (issue 12): defects found by a hostile review."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from jobcore import Queue, timeutil
from jobcore.cli import cli
from jobcore.errors import TransientStorageError
from jobcore.models import Job
from jobcore.testing import drain


class _AheadClock:
    """`time` as seen by `jobcore.timeutil` on a machine whose clock runs two days ahead."""

    def time_ns(self) -> int:
        return time.time_ns() + 2 * 86_400 * 1_000_000_000


def test_dlq_purge_and_since_use_the_store_clock_not_this_process_clock(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Queue(pg_url) as queue:
        failed = queue.enqueue("noop", {"fail": True}, max_attempts=1).job.id
        drain(queue)
        assert queue.get(failed).status == "failed"  # failed just now, by the server's clock
    monkeypatch.setattr(timeutil, "time", _AheadClock())
    runner = CliRunner()
    listed = runner.invoke(cli, ["--db", pg_url, "dlq", "list", "--since", "1h", "--json"])
    assert listed.exit_code == 0, listed.output
    assert failed in listed.output  # it failed within the last hour
    purged = runner.invoke(cli, ["--db", pg_url, "dlq", "purge", "--older-than", "1d", "--yes"])
    assert purged.exit_code == 0, purged.output
    assert "deleted 0 job(s)" in purged.output
    with Queue(pg_url) as queue:
        assert queue.get(failed).status == "failed"  # a dead letter one minute old is kept


def test_a_claim_answer_lost_on_a_dropped_connection_does_not_fail_a_job_that_never_ran(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Queue(pg_url) as queue:
        job_id = queue.enqueue("noop", {}, max_attempts=1).job.id
        storage = queue.storage
        real_commit = storage.commit_batch
        lost: list[Job] = []

        def commit_then_lose_the_answer(*args: Any, **kwargs: Any) -> Any:
            recorded, jobs = real_commit(*args, **kwargs)
            if jobs and not lost:  # committed on the server; the client never hears of it
                lost.extend(jobs)
                raise TransientStorageError("PostgreSQL: server closed the connection")
            return recorded, jobs

        monkeypatch.setattr(storage, "commit_batch", commit_then_lose_the_answer)
        deadline = time.monotonic() + 20
        while queue.get(job_id).status not in ("completed", "failed"):
            assert time.monotonic() < deadline
            drain(queue, lease=1.0)
            time.sleep(0.2)
        assert lost  # the claim's answer really was lost once
        job = queue.get(job_id)
        assert job.status == "completed", (job.status, job.last_error)


def test_the_dashboard_reader_reconnects_after_its_connection_was_terminated(
    pg_url: str,
) -> None:
    import psycopg
    from jobcore_http.dashboard.sql import sql_for

    with Queue(pg_url) as queue:
        queue.enqueue("noop", {})
        sql = sql_for(queue.storage)
        try:
            assert sql.rows("SELECT count(*) FROM jobs")[0][0] == 1
            [(pid,)] = sql.rows("SELECT pg_backend_pid()")
            with psycopg.connect(queue.storage.target.conninfo, autocommit=True) as admin:  # type: ignore[attr-defined]
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            # a server restart or failover: the reader reconnects and the page still answers
            answers = []
            for _ in range(2):
                try:
                    answers.append(sql.rows("SELECT count(*) FROM jobs")[0][0])
                except Exception as exc:
                    answers.append(type(exc).__name__)
            assert answers == [1, 1], answers
        finally:
            sql.close()


EVIL = "<script>alert(1)</script>\"'%_\\; DROP TABLE jobs;--"


def test_dashboard_pages_on_postgres_take_hostile_filters_and_escape_names(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient
    from jobcore_http.dashboard import router
    from jobcore_http.dashboard.session import token_hash

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    with Queue(pg_url) as queue:
        queue.enqueue("noop", {"fail": True}, queue=EVIL, max_attempts=1)
        drain(queue, worker_id=EVIL)
        app = FastAPI()
        app.state.queue = queue
        app.state.token_lookup = {token_hash("r"): ("viewer", "read")}.get
        app.include_router(router)
        client = TestClient(app)
        client.post("/ui/login", data={"token": "r"})
        try:
            for url, params in [
                ("/", {}),
                ("/ui/jobs", {}),
                ("/ui/jobs", {"queue": EVIL}),
                ("/ui/jobs", {"type": EVIL, "q": EVIL}),
                ("/ui/jobs", {"q": "%"}),
                ("/ui/jobs", {"worker": EVIL, "status": "failed"}),
                ("/ui/workers", {}),
                ("/ui/dead-letters", {}),
            ]:
                answer = client.get(url, params=params)
                assert answer.status_code in (200, 400), (url, params, answer.status_code)
                assert "<script>alert" not in answer.text, (url, params)
            listed = client.get("/ui/jobs", params={"queue": EVIL}).text
            assert "&lt;script&gt;alert(1)" in listed  # found by the hostile name, escaped
            assert queue.storage.count_by_status() == {"failed": 1}
        finally:
            app.state.dashboard.close()
