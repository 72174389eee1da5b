"""dlq notifications are bounded and off the worker's path (issue 22 items 9 and 11).

A real local HTTP server that trickles or floods an endless answer, a real
`notify_command` whose children would outlive it, a real worker.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import jobcore_test_plugin as tp
import pytest
from jobcore_dlq import DlqPlugin, DlqSettings
from jobcore_dlq.notify import Notifier, post
from testenv import LocalHTTPServer, subprocess_env, wait_for

from jobcore import JobStatus, Queue
from jobcore.testing import drain

MakeQueue = Callable[..., Queue]


class EndlessAnswer:
    """Answers every POST with a body that never ends: one byte per 50 ms (`trickle`), or
    as fast as the client reads. Counts requests begun and connections the client ended."""

    def __init__(self, *, trickle: bool) -> None:
        self.begun = 0
        self.ended = 0
        self.stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["content-length"]))
                server.begun += 1
                self.send_response(200)
                self.end_headers()
                chunk = b"x" if trickle else b"x" * 65536
                try:
                    while not server.stop.is_set():
                        self.wfile.write(chunk)
                        self.wfile.flush()
                        if trickle:
                            time.sleep(0.05)
                except OSError:
                    server.ended += 1

        self.http = LocalHTTPServer(Handler)
        self.url = f"{self.http.url}/hook"

    def close(self) -> None:
        self.stop.set()
        self.http.close()


@pytest.fixture
def trickle() -> Iterator[EndlessAnswer]:
    server = EndlessAnswer(trickle=True)
    yield server
    server.close()


@pytest.fixture
def flood() -> Iterator[EndlessAnswer]:
    server = EndlessAnswer(trickle=False)
    yield server
    server.close()


def fail_jobs(queue: Queue, count: int) -> None:
    for _ in range(count):
        queue.enqueue("fail", {"how": "permanent"})


def drained(queue: Queue) -> bool:
    thread = threading.Thread(target=drain, args=(queue,), daemon=True)
    thread.start()
    thread.join(30)
    return not thread.is_alive()


def test_a_trickling_notify_url_is_cut_at_its_deadline_off_the_workers_path(
    jobcore_make_queue: MakeQueue, trickle: EndlessAnswer, caplog: pytest.LogCaptureFixture
) -> None:
    plugin = DlqPlugin()
    settings = {"notify_url": trickle.url, "notify_timeout": "1s"}
    queue = jobcore_make_queue(plugin, tp, plugin_settings={"dlq": settings})
    fail_jobs(queue, 2)
    with caplog.at_level(logging.ERROR, logger="jobcore.dlq"):
        assert drained(queue)  # the stop waits for the backlog, within its bound
    assert trickle.begun == 2
    wait_for(lambda: trickle.ended == 2, 5)  # each cut by the client at the deadline
    timed_out = [r for r in caplog.records if "notify_url timed out after 1s" in r.getMessage()]
    assert len(timed_out) == 2


def test_the_failed_hook_returns_before_the_notification_is_sent(
    trickle: EndlessAnswer, jobcore_make_queue: MakeQueue
) -> None:
    """The hook only queues: the worker's other hooks never wait for a receiver."""
    plugin = DlqPlugin()
    plugin.settings = DlqSettings(notify_url=trickle.url, notify_timeout=3)
    queue = jobcore_make_queue(tp)
    job = queue.enqueue("noop", {}).job
    plugin.jobcore_job_failed(job=job, error="boom")
    assert trickle.ended == 0  # the POST (3 s at the least) is still to come or under way
    wait_for(lambda: trickle.begun == 1, 5)
    plugin.notifier.flush(10)
    wait_for(lambda: trickle.ended == 1, 5)


def test_an_endless_fast_answer_is_read_only_up_to_the_limit(
    jobcore_make_queue: MakeQueue, flood: EndlessAnswer, caplog: pytest.LogCaptureFixture
) -> None:
    settings = {"notify_url": flood.url, "notify_timeout": "20s"}
    queue = jobcore_make_queue(DlqPlugin(), tp, plugin_settings={"dlq": settings})
    fail_jobs(queue, 1)
    with caplog.at_level(logging.ERROR, logger="jobcore.dlq"):
        assert drained(queue)
    wait_for(lambda: flood.ended == 1, 5)
    assert not [r for r in caplog.records if "notify_url" in r.getMessage()]  # no timeout


def test_a_full_backlog_drops_and_logs(
    trickle: EndlessAnswer, jobcore_make_queue: MakeQueue, caplog: pytest.LogCaptureFixture
) -> None:
    notifier = Notifier(capacity=2)
    settings = DlqSettings(notify_url=trickle.url, notify_timeout=0.5)
    with caplog.at_level(logging.ERROR, logger="jobcore.dlq"):
        for number in range(6):
            notifier.submit(settings, f"job{number}", b"{}")
        notifier.flush(20)
    dropped = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert 3 <= len(dropped) <= 4  # two wait; one more if the first is already under way
    assert trickle.begun == 6 - len(dropped)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_timed_out_notify_command_leaves_no_child_behind(
    jobcore_make_queue: MakeQueue, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 22 item 11: the whole tree of the command ends at its timeout, not only sh."""
    pids = tmp_path / "pids"
    command = f"sleep 300 & echo $! >> {pids}; setsid sleep 301 & echo $! >> {pids}; wait"
    settings = {"notify_command": command, "notify_timeout": "500ms"}
    queue = jobcore_make_queue(DlqPlugin(), tp, plugin_settings={"dlq": settings})
    fail_jobs(queue, 1)
    try:
        with caplog.at_level(logging.ERROR, logger="jobcore.dlq"):
            assert drained(queue)
        assert any("notify_command timed out" in r.getMessage() for r in caplog.records)
        sleepers = [int(pid) for pid in wait_for(lambda: pids.read_text().split(), 5)]
        assert len(sleepers) == 2
        wait_for(lambda: not any(alive(pid) for pid in sleepers), 5)
    finally:
        for pid in [int(p) for p in pids.read_text().split()] if pids.exists() else []:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert len(queue.list_jobs(statuses=[JobStatus.FAILED])) == 1


def test_the_exit_does_not_wait_again_for_a_backlog_the_stop_gave_up(
    trickle: EndlessAnswer, tmp_path: Path
) -> None:
    """`jobcore run` waits for the backlog once, within its bound, at the worker's stop;
    the process's exit right after does not wait that long again."""
    env = subprocess_env(
        JOBCORE_DB=str(tmp_path / "jobs.db"),
        JOBCORE_DLQ_NOTIFY_URL=trickle.url,
        JOBCORE_DLQ_NOTIFY_TIMEOUT="200ms",
    )
    jobcore = [sys.executable, "-m", "jobcore"]
    lines = "\n".join(json.dumps({"how": "permanent"}) for _ in range(80))
    enqueue = [*jobcore, "enqueue", "fail", "--from", "-", "--max-attempts", "1"]
    done = subprocess.run(enqueue, input=lines.encode(), env=env, capture_output=True)
    assert done.returncode == 0, done.stderr
    run = subprocess.run(
        [*jobcore, "run", "--until-empty"], env=env, capture_output=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    gave_up = [line for line in run.stderr.decode().splitlines() if "not sent after" in line]
    assert len(gave_up) == 1, gave_up


def test_a_redirect_leads_only_to_http_or_https(caplog: pytest.LogCaptureFixture) -> None:
    """An FTP redirect would escape the POST's total deadline (one timeout per FTP step,
    sockets the deadline does not know): it is refused, nothing connects to it."""
    ftp = socket.socket()
    ftp.bind(("127.0.0.1", 0))
    ftp.listen(8)
    ftp.setblocking(False)
    target = f"ftp://127.0.0.1:{ftp.getsockname()[1]}/x"

    class Redirect(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["content-length"]))
            self.send_response(302)
            self.send_header("Location", target)
            self.end_headers()

    server = LocalHTTPServer(Redirect)
    try:
        with caplog.at_level(logging.ERROR, logger="jobcore.dlq"):
            post(f"{server.url}/hook", 2.0, "job1", b"{}")
    finally:
        server.close()
    with pytest.raises(BlockingIOError):
        ftp.accept()  # nobody came
    ftp.close()
    assert any("answered 302" in record.getMessage() for record in caplog.records)
