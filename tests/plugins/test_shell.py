"""shell plugin: real subprocesses, process groups, output limits, timeouts and cancel."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jobcore_shell
import pytest
from testenv import wait_for

from jobcore import InvalidPayload, JobStatus, Queue, Worker
from jobcore.testing import drain

MakeQueue = Callable[..., Queue]


@pytest.fixture
def queue(jobcore_make_queue: MakeQueue) -> Queue:
    return jobcore_make_queue(jobcore_shell)


def run_one(queue: Queue, payload: dict[str, Any], **options: Any) -> dict[str, Any]:
    job = queue.enqueue("shell", payload, **options).job
    drain(queue)
    return queue.get(job.id).to_json()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie counts as dead
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_command_through_the_shell(queue: Queue, tmp_path: Path) -> None:
    job = run_one(
        queue,
        {
            "command": "echo out; echo err >&2; echo $GREETING",
            "env": {"GREETING": "hi"},
            "cwd": str(tmp_path),
        },
    )
    assert job["status"] == "completed"
    result = job["result"]
    assert (
        result["exit_code"] == 0 and result["stdout"] == "out\nhi\n" and result["stderr"] == "err\n"
    )
    assert result["truncated"] is False and result["duration_ms"] > 0


def test_argv_without_a_shell(queue: Queue, tmp_path: Path) -> None:
    job = run_one(queue, {"argv": ["printf", "%s|", "a b", "$HOME"], "cwd": str(tmp_path)})
    assert job["result"]["stdout"] == "a b|$HOME|"


def test_output_is_bounded_and_marked(queue: Queue) -> None:
    job = run_one(queue, {"command": "seq 1 100000", "output_limit": 20})
    assert job["result"]["truncated"] is True
    assert len(job["result"]["stdout"]) == 20 and job["result"]["stdout"].endswith(
        "99999\n100000\n"
    )


def test_non_zero_exit_retries_naming_code_and_stderr_tail(queue: Queue) -> None:
    job = run_one(queue, {"command": "echo starting; echo 'disk full' >&2; exit 7"}, max_attempts=2)
    assert job["status"] == "failed" and job["attempts"] == 2
    assert job["errors"][0]["error"] == "CommandFailed: exit code 7; stderr: disk full"


def test_retry_then_success_is_idempotent_for_the_queue(queue: Queue, tmp_path: Path) -> None:
    counter = tmp_path / "count"
    script = (
        f"n=$(cat {counter} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {counter}; [ $n -ge 2 ]"
    )
    job = run_one(queue, {"command": script}, max_attempts=3)
    assert (
        job["status"] == "completed" and job["attempts"] == 2 and counter.read_text().strip() == "2"
    )


def test_missing_program_and_cwd_fail_permanently(queue: Queue, tmp_path: Path) -> None:
    job = run_one(queue, {"argv": ["definitely-not-a-program-xyz"]})
    assert (
        job["status"] == "failed" and job["attempts"] == 1 and "No such file" in job["last_error"]
    )
    job = run_one(queue, {"argv": ["true"], "cwd": str(tmp_path / "nope")})
    assert job["status"] == "failed" and job["attempts"] == 1


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({}, "exactly one of command or argv"),
        ({"command": "ls", "argv": ["ls"]}, "exactly one of command or argv"),
        ({"argv": []}, "argv"),
        ({"command": "ls", "timeout": "soon"}, "timeout"),
        ({"command": "ls", "shell": "/bin/bash"}, "shell: unknown field"),
        ({"command": "ls", "env": {"A": 1}}, "env.A"),
        # issue 22 item 16: payloads no program can ever receive are refused, naming the field
        ({"command": "echo a\0b"}, "command.*NUL"),
        ({"argv": ["echo", "a\0b"]}, "argv.*element 1 contains a NUL"),
        ({"argv": ["echo", "x" * 200 * 1024]}, "argv.*element 1 is 204800 bytes"),
        ({"command": "x" * 200 * 1024}, "command.*204800 bytes"),
        ({"argv": ["true"], "cwd": "/tmp\0x"}, "cwd.*NUL"),
        ({"argv": ["true"], "env": {"A=B": "1"}}, "env.*'A=B'"),
        ({"argv": ["true"], "env": {"": "1"}}, "env.*empty"),
        ({"argv": ["true"], "env": {"A\0": "1"}}, "env.*NUL"),
        ({"argv": ["true"], "env": {"A": "1\0"}}, "env.*NUL"),
        ({"argv": ["\ud800"]}, "argv.*lone surrogate"),
    ],
)
def test_bad_payloads(queue: Queue, payload: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidPayload, match=message):
        queue.enqueue("shell", payload)


def test_a_program_the_kernel_cannot_execute_fails_at_once(queue: Queue, tmp_path: Path) -> None:
    """ENOEXEC (no interpreter line, not a binary) will never start: permanent, no traceback."""
    junk = tmp_path / "junk"
    junk.write_bytes(b"\x7fELF\x00\x00garbage")
    junk.chmod(0o755)
    job = run_one(queue, {"argv": [str(junk)]}, max_attempts=3)
    assert job["status"] == "failed" and job["attempts"] == 1, job["errors"]
    assert job["last_error"].startswith("PermanentError: cannot run the command: Exec format")


def test_timeout_kills_the_whole_process_group(queue: Queue, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    command = f"sleep 60 & echo $! > {pids}; sh -c 'sleep 61' & echo $! >> {pids}; wait"
    job = run_one(queue, {"command": command, "timeout": "500ms"}, max_attempts=1)
    assert job["status"] == "failed" and "timed out after 0.5s" in job["last_error"]
    grandchildren = [int(pid) for pid in pids.read_text().split()]
    assert len(grandchildren) == 2
    wait_for(lambda: not any(alive(pid) for pid in grandchildren))


def test_job_timeout_also_kills_the_group(queue: Queue, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    job = run_one(
        queue, {"command": f"sleep 60 & echo $! > {pids}; wait"}, timeout=0.5, max_attempts=1
    )
    assert job["status"] == "failed" and "JobTimeout" in job["last_error"]
    grandchild = int(wait_for(lambda: pids.exists() and pids.read_text().strip()))
    wait_for(lambda: not alive(grandchild))


def test_cancel_kills_the_whole_process_group(queue: Queue, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    job = queue.enqueue("shell", {"command": f"sleep 60 & echo $! > {pids}; wait"}).job
    worker = Worker(queue, until_empty=True)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    grandchild = int(wait_for(lambda: pids.exists() and pids.read_text().strip()))
    queue.cancel([job.id])
    thread.join(15)
    assert not thread.is_alive()
    assert queue.get(job.id).status is JobStatus.CANCELLED
    wait_for(lambda: not alive(grandchild))


def test_shutdown_kills_the_group_before_the_worker_returns(
    jobcore_make_queue: MakeQueue, tmp_path: Path
) -> None:
    """Issue 8 defect 4: the job is released only once its process group is gone."""
    queue = jobcore_make_queue(jobcore_shell, shutdown_timeout=0.2)
    pids, late = tmp_path / "pids", tmp_path / "late"
    command = f"trap '' TERM; (sleep 4; touch {late}) & echo $! > {pids}; wait"
    job = queue.enqueue("shell", {"command": command}).job
    worker = Worker(queue)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    grandchild = int(wait_for(lambda: pids.exists() and pids.read_text().strip()))
    worker.stop()
    thread.join(15)
    assert not thread.is_alive() and worker.exit_code == 0
    assert not alive(grandchild)  # killed and reaped before the release was committed
    released = queue.get(job.id)
    assert released.status is JobStatus.PENDING and released.attempts == 0


def test_a_stop_check_that_raises_leaves_no_command_running(tmp_path: Path) -> None:
    from jobcore_shell.runner import run_command

    pid_file = tmp_path / "pid"

    def should_stop() -> str | None:
        if pid_file.exists() and pid_file.read_text().strip():
            raise RuntimeError("the stop check broke")
        return None

    with pytest.raises(RuntimeError, match="the stop check broke"):
        run_command(
            f"echo $$ > {pid_file}; exec sleep 60",
            shell=True,
            cwd=None,
            env=None,
            timeout=None,
            output_limit=1000,
            should_stop=should_stop,
        )
    with pytest.raises(ProcessLookupError):  # killed and reaped, not left running
        os.kill(int(pid_file.read_text()), 0)


@pytest.mark.parametrize("job_type", ["shell", "exec"])
def test_an_output_limit_over_16_mib_is_refused_at_enqueue(
    jobcore_make_queue: MakeQueue, job_type: str
) -> None:
    """The tail is kept in the worker's memory: `output_limit: 1e12` grew a worker to ~1 GiB."""
    import jobcore_agent

    queue = jobcore_make_queue(jobcore_shell, jobcore_agent)
    base: dict[str, Any] = {"command": "true"} if job_type == "shell" else {"sha256": "ab" * 32}
    assert queue.build(job_type, {**base, "output_limit": 16 << 20}).payload["output_limit"]
    for limit in ((16 << 20) + 1, 1e12):
        with pytest.raises(InvalidPayload, match=r"output_limit: .*over the maximum of 16777216"):
            queue.enqueue(job_type, {**base, "output_limit": limit})
    assert queue.list_jobs() == []


def test_a_job_stored_with_a_larger_output_limit_still_runs(queue: Queue) -> None:
    """The maximum is an enqueue check, not the payload model's: a job stored before it
    (or by another producer) still runs, its streams cut at run time, not failed as an
    invalid payload."""
    job = queue.enqueue("shell", {"command": "echo hi"}).job
    with queue.storage.transaction() as conn:
        conn.execute(
            "UPDATE jobs SET payload = json_set(payload, '$.output_limit', 1000000000000)"
            " WHERE id = ?",
            (job.id,),
        )
    assert queue.get(job.id).payload["output_limit"] == 10**12
    drain(queue)
    done = queue.get(job.id).to_json()
    assert done["status"] == "completed", done
    assert done["result"]["stdout"] == "hi\n"


def test_what_is_kept_of_a_stream_is_bounded_by_max_result_bytes(
    jobcore_make_queue: MakeQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream longer than a result can store is not held whole in the worker's memory."""
    from jobcore_shell import runner

    held: list[int] = []

    class Measured(runner.TailBuffer):
        def feed(self, chunk: bytes) -> None:
            super().feed(chunk)
            held.append(self._size)

    monkeypatch.setattr(runner, "TailBuffer", Measured)
    queue = jobcore_make_queue(jobcore_shell, max_result_bytes=100_000)
    job = run_one(
        queue, {"command": "head -c 5000000 /dev/zero | tr '\\0' a", "output_limit": 16 << 20}
    )
    assert job["status"] == "completed", job
    assert held and max(held) <= 100_000  # all 5 MB were held before
    assert job["result"]["truncated"] is True  # over max_result_bytes: stored as a stub
    held.clear()
    finished = runner.run_command(
        "head -c 20000000 /dev/zero",
        shell=True,
        cwd=None,
        env=None,
        timeout=None,
        output_limit=10**12,  # another plugin's call: bounded too
        should_stop=lambda: None,
    )
    assert finished.stdout.limit == runner.MAX_OUTPUT_LIMIT and finished.stdout.truncated
    assert max(held) <= runner.MAX_OUTPUT_LIMIT


@pytest.mark.parametrize("name", ["-greet", "+greet", "--greet"])
def test_a_command_starting_with_a_dash_or_plus_is_the_command_not_shell_options(
    queue: Queue, tmp_path: Path, name: str
) -> None:
    """`/bin/sh -c -x…` read the command as options (`Illegal option`, or none left to run)."""
    script = tmp_path / name
    script.write_text('#!/bin/sh\necho "hello $1"\n')
    script.chmod(0o755)
    env = {"PATH": f"{tmp_path}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    job = run_one(queue, {"command": f"{name} world", "env": env, "cwd": str(tmp_path)})
    assert job["status"] == "completed", job
    assert job["result"]["stdout"] == "hello world\n" and job["result"]["stderr"] == ""
    # $0 is still the shell and no positional parameter appears; no option was turned on
    shell = run_one(queue, {"command": 'echo "$0|$#"; case $- in *x*) echo xtrace;; esac'})
    assert shell["result"]["stdout"] == "/bin/sh|0\n", shell
