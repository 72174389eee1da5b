"""A job's commands, and everything they start, live no longer than the job or the worker.

Real `jobcore run` processes killed with SIGKILL, real `setsid` descendants that
leave the command's process group (issue 22 item 6, issue 17 item 25).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import jobcore_shell
import pytest
from testenv import subprocess_env, wait_for

from jobcore import JobStatus, Queue, Worker
from jobcore.testing import drain

MakeQueue = Callable[..., Queue]


def alive(pid: int) -> bool:
    """Running (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # gone, or gone while being read
        return False


def read_pids(path: Path, count: int) -> list[int]:
    def ready() -> list[int] | None:
        pids = [int(p) for p in path.read_text().split()] if path.exists() else []
        return pids if len(pids) >= count else None

    pids: list[int] = wait_for(ready, 20)
    return pids


@pytest.fixture
def leftovers() -> Iterator[list[int]]:
    """Pids a test started; whatever survived (on broken code) is killed afterwards."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


# a plain background child, and one that left the process group and session
TWO_SLEEPERS = (
    "sleep 300 & echo $! >> {pids}; setsid sh -c 'echo $$ >> {pids}; exec sleep 301' & wait"
)


def test_sigkill_of_the_worker_ends_its_commands(tmp_path: Path, leftovers: list[int]) -> None:
    env = subprocess_env(JOBCORE_DB=str(tmp_path / "jobs.db"))
    pids = tmp_path / "pids"
    jobcore = [sys.executable, "-m", "jobcore"]
    payload = json.dumps({"command": TWO_SLEEPERS.format(pids=pids)})
    enqueued = subprocess.run(
        [*jobcore, "enqueue", "shell", payload], env=env, capture_output=True, timeout=60
    )
    assert enqueued.returncode == 0, enqueued.stderr
    worker = subprocess.Popen(
        [*jobcore, "run"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        leftovers.extend(read_pids(pids, 2))
        assert all(alive(pid) for pid in leftovers)
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        wait_for(lambda: not any(alive(pid) for pid in leftovers), 5)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


@pytest.fixture
def queue(jobcore_make_queue: MakeQueue) -> Queue:
    return jobcore_make_queue(jobcore_shell)


def test_a_setsid_descendant_dies_with_a_timed_out_job(
    queue: Queue, tmp_path: Path, leftovers: list[int]
) -> None:
    pids = tmp_path / "pids"
    command = TWO_SLEEPERS.format(pids=pids)
    job = queue.enqueue("shell", {"command": command, "timeout": "1s"}, max_attempts=1).job
    drain(queue)
    leftovers.extend(read_pids(pids, 2))
    assert queue.get(job.id).status is JobStatus.FAILED
    wait_for(lambda: not any(alive(pid) for pid in leftovers), 5)


def test_a_double_forked_setsid_descendant_dies_with_a_cancelled_job(
    queue: Queue, tmp_path: Path, leftovers: list[int]
) -> None:
    """The daemon's parent exits at once: it is orphaned while the job still runs."""
    pids = tmp_path / "pids"
    command = f"(setsid sh -c 'echo $$ >> {pids}; exec sleep 302' &); sleep 300"
    job = queue.enqueue("shell", {"command": command}).job
    worker = Worker(queue, until_empty=True)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    leftovers.extend(read_pids(pids, 1))
    queue.cancel([job.id])
    thread.join(15)
    assert not thread.is_alive() and queue.get(job.id).status is JobStatus.CANCELLED
    wait_for(lambda: not any(alive(pid) for pid in leftovers), 5)


def test_a_daemon_left_by_a_finished_command_is_killed(
    queue: Queue, tmp_path: Path, leftovers: list[int]
) -> None:
    pids = tmp_path / "pids"
    command = f"setsid sh -c 'echo $$ >> {pids}; exec sleep 303' & sleep 0.2; echo done"
    job = queue.enqueue("shell", {"command": command}).job
    drain(queue)
    leftovers.extend(read_pids(pids, 1))
    finished = queue.get(job.id)
    assert finished.status is JobStatus.COMPLETED and finished.result["stdout"] == "done\n"
    wait_for(lambda: not any(alive(pid) for pid in leftovers), 5)


def test_exit_code_and_signal_of_the_command_are_reported(queue: Queue) -> None:
    """The guard between worker and command is invisible in the result."""
    job = queue.enqueue("shell", {"command": "exit 7"}, max_attempts=1).job
    drain(queue)
    assert queue.get(job.id).last_error.startswith("CommandFailed: exit code 7")
    job = queue.enqueue("shell", {"command": "kill -TERM $$"}, max_attempts=1).job
    drain(queue)
    assert f"exit code {-signal.SIGTERM}" in (queue.get(job.id).last_error or "")


def test_commands_outlive_a_killed_guard_server_and_a_new_one_starts(tmp_path: Path) -> None:
    """The per-process guard server only forks guards: its death stops no running command."""
    from jobcore import subprocesses

    running = subprocesses.spawn(
        ["sh", "-c", f"echo started > {tmp_path / 'a'}; sleep 0.5; exit 4"]
    )
    wait_for((tmp_path / "a").exists)
    server = subprocesses._server._popen
    assert server is not None
    server.kill()
    server.wait()
    assert running.wait(10) == 4  # ran to its end, its exit code reported
    again = subprocesses.spawn(["sh", "-c", "exit 5"])
    assert again.wait(10) == 5
    assert subprocesses._server._popen is not server


def test_a_command_sees_the_workers_environment_and_folder_of_now(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guard server started earlier; the command still gets today's env and cwd."""
    from jobcore import subprocesses

    subprocesses.spawn(["true"]).wait(10)
    monkeypatch.setenv("JOBCORE_TEST_LATE", "yes")
    monkeypatch.chdir(tmp_path)
    proc = subprocesses.spawn(
        ["sh", "-c", 'echo "$JOBCORE_TEST_LATE $(pwd)"'], stdout=subprocesses.PIPE
    )
    assert proc.wait(10) == 0 and proc.stdout is not None
    assert proc.stdout.read().decode() == f"yes {tmp_path}\n"
    proc.stdout.close()


def test_a_signal_to_its_own_group_reaches_the_command_and_not_its_guard(queue: Queue) -> None:
    """The command leads its own process group, as a directly started one would:
    `kill -USR1 0` is the script's business, not a signal that kills the guard."""
    command = "trap 'echo usr1' USR1; kill -USR1 0; echo after"
    job = queue.enqueue("shell", {"command": command, "timeout": "20s"}, max_attempts=1).job
    drain(queue)
    finished = queue.get(job.id)
    assert finished.status is JobStatus.COMPLETED, finished.last_error
    assert finished.result["stdout"] == "usr1\nafter\n"


def test_kill_of_its_own_group_ends_the_command_and_its_children(
    queue: Queue, tmp_path: Path, leftovers: list[int]
) -> None:
    """`kill -- -$$`, the usual way for a script to end itself and its children."""
    pids = tmp_path / "pids"
    command = f"sleep 300 & echo $! >> {pids}; kill -- -$$; echo after"
    job = queue.enqueue("shell", {"command": command, "timeout": "20s"}, max_attempts=1).job
    drain(queue)
    leftovers.extend(read_pids(pids, 1))
    finished = queue.get(job.id)
    assert finished.status is JobStatus.FAILED
    assert f"exit code {-signal.SIGTERM}" in (finished.last_error or "")


def test_a_command_that_kills_its_guard_takes_its_whole_tree_along(
    queue: Queue, tmp_path: Path, leftovers: list[int]
) -> None:
    """`kill -9 $PPID` from the command: what the guard held is ended by the guard server.
    (The guard may die before it reported the start: then the start is the error.)"""
    pids = tmp_path / "pids"
    command = (
        f"setsid sh -c 'echo $$ >> {pids}; exec sleep 300' & "
        f"while [ ! -s {pids} ]; do sleep 0.01; done; "
        f"echo $$ >> {pids}; kill -9 $PPID; exec sleep 301"
    )
    job = queue.enqueue("shell", {"command": command, "timeout": "60s"}, max_attempts=1).job
    drain(queue)
    leftovers.extend(read_pids(pids, 2))
    finished = queue.get(job.id)
    assert finished.status is JobStatus.FAILED
    error = finished.last_error or ""
    assert f"exit code {-signal.SIGKILL}" in error or "before it reported the start" in error
    wait_for(lambda: not any(alive(pid) for pid in leftovers), 5)


def test_a_stopped_guard_is_resumed(queue: Queue) -> None:
    """`kill -STOP $PPID`: a stopped guard could not end its command (at a timeout, or when
    the worker dies) and would be left stopped for good; the guard server resumes it."""
    command = "kill -STOP $PPID; sleep 0.2; echo resumed"
    job = queue.enqueue("shell", {"command": command, "timeout": "30s"}, max_attempts=1).job
    worker = threading.Thread(target=drain, args=(queue,), daemon=True)
    worker.start()
    worker.join(20)
    assert not worker.is_alive()
    finished = queue.get(job.id)
    assert finished.status is JobStatus.COMPLETED, finished.last_error
    assert finished.result["stdout"] == "resumed\n"


GUARD_WITHOUT_SCAN = """
import os, socket, sys
from jobcore import _guard

def counted():
    with open(sys.argv[1], "a") as log:
        log.write("scan\\n")
    return []

_guard.descendants = counted
ours, theirs = socket.socketpair()
null = os.open(os.devnull, os.O_RDWR)
if os.fork() == 0:
    ours.close()
    _guard.guard(theirs.fileno(), [null, null, null])
theirs.close()
body = b"2.0\\0\\x001\\0true\\0PATH=" + os.environ["PATH"].encode()
ours.sendall(b"%d\\n" % len(body) + body)
reply = b""
while (chunk := ours.recv(4096)):
    reply += chunk
print(reply.decode(), end="")
"""


def test_a_command_that_leaves_nothing_costs_no_process_table_scan(tmp_path: Path) -> None:
    """Reading every /proc entry per command would cost O(processes on the machine):
    with no child left, the guard knows there is no descendant left."""
    scans = tmp_path / "scans"
    done = subprocess.run(
        [sys.executable, "-c", GUARD_WITHOUT_SCAN, str(scans)],
        env=subprocess_env(),
        capture_output=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.decode().splitlines()
    assert any(line.startswith("pid ") for line in lines) and lines[-1] == "exit 0"
    assert not scans.exists()


def test_a_request_lost_with_a_killed_guard_server_is_made_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The server dies holding a request it never served: nothing was started, so the
    command is started by a new server instead of failing its job's attempt."""
    from jobcore import subprocesses

    subprocesses.spawn(["true"]).wait(10)
    server = subprocesses._server._popen
    assert server is not None
    sent = threading.Event()
    request = subprocesses._server.request

    def noted(fds: list[int]) -> None:
        request(fds)
        sent.set()

    monkeypatch.setattr(subprocesses._server, "request", noted)
    os.kill(server.pid, signal.SIGSTOP)  # the request waits, unread, in its socket
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(subprocesses.spawn(["sh", "-c", "exit 3"]).wait(20))
        except OSError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    assert sent.wait(20)
    server.kill()
    server.wait()
    thread.join(30)
    assert outcome == [3]


def test_a_relative_cwd_is_taken_from_the_workers_folder_of_now(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As with Popen: `cwd="sub"` is below the worker's folder, not the guard server's."""
    from jobcore import subprocesses

    subprocesses.spawn(["true"]).wait(10)
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    proc = subprocesses.spawn(["pwd"], cwd="sub", stdout=subprocesses.PIPE)
    assert proc.wait(10) == 0 and proc.stdout is not None
    assert proc.stdout.read().decode() == f"{tmp_path / 'sub'}\n"
    proc.stdout.close()
