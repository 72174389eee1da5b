"""The api backend stops when asked and writes nothing afterwards (issue 22 item 5).

A real worker process calls the Anthropic stub over HTTP; the stub holds its
answer (a slow API) while the job is cancelled or times out, then answers.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from anthropic_stub import StubServer
from claude_worker import ClaudeWorker
from testenv import wait_for

PAYLOAD = {"prompt": "List the colours", "target_path": "answers/colours.md"}


@pytest.fixture
def worker(tmp_path: Path, anthropic_stub: StubServer) -> Iterator[ClaudeWorker]:
    setup = ClaudeWorker(tmp_path, anthropic_stub, JOBCORE_CLAUDE_BACKEND="api")
    yield setup
    setup.stop_all()


def finish(worker: ClaudeWorker, anthropic_stub: StubServer, requests: int) -> None:
    """Let the held answers go out, give a late writer its chance, then stop the worker.

    Before the fix the abandoned handler wrote the answer within milliseconds of
    receiving it; two seconds is the window this looks for such a write.
    """
    anthropic_stub.release()
    wait_for(lambda: anthropic_stub.answered == requests, timeout=20)
    target = worker.root / PAYLOAD["target_path"]
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline and not target.exists():
        time.sleep(0.02)
    for proc in worker.workers:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, worker.log()


def test_a_cancel_stops_the_call_and_nothing_is_written(
    worker: ClaudeWorker, anthropic_stub: StubServer
) -> None:
    anthropic_stub.hold()
    job_id = worker.enqueue("claude_extraction", PAYLOAD)
    worker.worker()
    wait_for(lambda: len(anthropic_stub.message_requests()) == 1, timeout=30)
    assert worker.cli("cancel", job_id).returncode == 0
    wait_for(lambda: worker.job(job_id)["status"] == "cancelled", timeout=20)
    finish(worker, anthropic_stub, requests=1)
    assert worker.job(job_id)["status"] == "cancelled"
    assert not (worker.root / "answers/colours.md").exists()


def test_timed_out_attempts_write_nothing(worker: ClaudeWorker, anthropic_stub: StubServer) -> None:
    anthropic_stub.hold()
    job_id = worker.enqueue("claude_extraction", PAYLOAD, "--timeout", "1s", "--max-attempts", "2")
    worker.worker()
    wait_for(lambda: worker.job(job_id)["status"] == "failed", timeout=60)
    job = worker.job(job_id)
    assert [e["error"] for e in job["errors"]] == ["JobTimeout: timed out after 1s"] * 2
    sent = len(anthropic_stub.message_requests())  # an attempt stopped before its call sends none
    assert sent >= 1
    finish(worker, anthropic_stub, requests=sent)
    assert not (worker.root / "answers/colours.md").exists()


def test_the_settings_timeout_bounds_the_whole_call(
    tmp_path: Path, anthropic_stub: StubServer
) -> None:
    """A stream that keeps sending pings never hits a read timeout: the total deadline ends it."""
    setup = ClaudeWorker(
        tmp_path,
        anthropic_stub,
        JOBCORE_CLAUDE_BACKEND="api",
        JOBCORE_CLAUDE_STREAM="true",
        JOBCORE_CLAUDE_TIMEOUT="1",
    )
    try:
        anthropic_stub.hold()
        job_id = setup.enqueue("claude_extraction", PAYLOAD, "--max-attempts", "1")
        setup.worker()
        wait_for(lambda: setup.job(job_id)["status"] == "failed", timeout=60)
        assert "did not answer within 1s" in setup.job(job_id)["last_error"]
        finish(setup, anthropic_stub, requests=1)
        assert not (setup.root / "answers/colours.md").exists()
    finally:
        setup.stop_all()


def connections_to(port: int) -> int:
    """Established TCP connections whose remote end is `port` on this host (the worker's)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as rows:
            next(rows)
            for row in rows:
                fields = row.split()
                remote, state = fields[2], fields[3]
                count += state == "01" and int(remote.rsplit(":", 1)[1], 16) == port
    return count


def threads_of(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="needs Linux /proc")
def test_stopped_calls_leave_no_thread_or_connection_behind(
    worker: ClaudeWorker, anthropic_stub: StubServer
) -> None:
    """An API that does not answer: each cancelled call's thread and connection end at once
    (they stayed blocked in a read until the API answered or `timeout`, 600 s, passed)."""
    anthropic_stub.hold()
    port = int(anthropic_stub.base_url.rsplit(":", 1)[1])
    calls = 4
    lines = [json.dumps({"prompt": f"call {n}", "target_path": f"t/{n}.md"}) for n in range(calls)]
    (worker.tmp / "jobs.jsonl").write_text("\n".join(lines) + "\n")
    proc = worker.worker("--concurrency", "1")
    warm_up = worker.enqueue("noop", {})
    wait_for(lambda: worker.job(warm_up)["status"] == "completed", timeout=30)
    idle = threads_of(proc.pid)
    done = worker.cli("enqueue", "claude_extraction", "--from", str(worker.tmp / "jobs.jsonl"))
    assert done.returncode == 0, done.stderr
    for n, job_id in enumerate(done.stdout.split()):
        wait_for(lambda n=n: len(anthropic_stub.message_requests()) > n, timeout=30)
        worker.queue().cancel([job_id])
        wait_for(lambda job_id=job_id: worker.job(job_id)["status"] == "cancelled", timeout=20)
    wait_for(lambda: connections_to(port) == 0, timeout=5)
    assert threads_of(proc.pid) <= idle + 1, (idle, threads_of(proc.pid))
    finish(worker, anthropic_stub, requests=calls)
    assert not (worker.root / "t").exists()
