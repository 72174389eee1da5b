"""The artifact cache and the `exec` job type, with a real file server and real subprocesses."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jobcore_agent
import pytest
from jobcore_agent.cache import ArtifactCache, ChecksumMismatch
from jobcore_agent.exec_job import ArtifactSource, DownloadFailed
from testenv import wait_for

from conftest import FileServer, MakeSolver, sha256
from jobcore import Queue
from jobcore.testing import drain

MakeQueue = Callable[..., Queue]


@pytest.fixture
def queue(jobcore_make_queue: MakeQueue, cache_dir: Path) -> Queue:
    return jobcore_make_queue(
        jobcore_agent,
        backoff_base=0.01,
        backoff_cap=0.01,
        plugin_settings={"agent": {"cache_dir": str(cache_dir)}},
    )


def run_exec(queue: Queue, payload: dict[str, Any], **options: Any) -> dict[str, Any]:
    """Enqueue an exec job and run workers until it finished (retries included)."""
    job_id = queue.enqueue("exec", payload, **options).job.id

    def finished() -> dict[str, Any] | None:
        drain(queue)
        job = queue.get(job_id).to_json()
        return job if job["status"] in ("completed", "failed", "cancelled") else None

    result: dict[str, Any] = wait_for(finished, timeout=20)
    return result


def test_exec_runs_a_downloaded_solver_and_returns_its_json(
    queue: Queue, file_server: FileServer, make_solver: MakeSolver
) -> None:
    data, digest = make_solver(
        "print(json.dumps({'sum': params['a'] + params['b'], 'args': args}))"
    )
    url = file_server.add("/solver", data)
    job = run_exec(
        queue, {"url": url, "sha256": digest, "params": {"a": 2, "b": 3}, "args": ["-x"]}
    )
    assert job["status"] == "completed", job["last_error"]
    assert job["result"] == {"sum": 5, "args": ["-x"]}


def test_exec_result_is_the_streams_when_stdout_is_not_json(
    queue: Queue, file_server: FileServer, make_solver: MakeSolver
) -> None:
    data, digest = make_solver("print('plain'); print('warn', file=sys.stderr)")
    job = run_exec(queue, {"url": file_server.add("/s", data), "sha256": digest})
    assert job["result"] == {"stdout": "plain\n", "stderr": "warn\n", "exit_code": 0}


def test_cached_artifact_is_reused_without_a_download(
    queue: Queue, file_server: FileServer, make_solver: MakeSolver
) -> None:
    data, digest = make_solver("print(json.dumps(params))")
    url = file_server.add("/solver", data)
    for n in range(3):
        job = run_exec(queue, {"url": url, "sha256": digest, "params": {"n": n}})
        assert job["result"] == {"n": n}
    assert file_server.hits["/solver"] == 1


def test_checksum_mismatch_fails_permanently_and_caches_nothing(
    queue: Queue, file_server: FileServer, make_solver: MakeSolver, cache_dir: Path
) -> None:
    data, _ = make_solver("print(1)")
    url = file_server.add("/solver", data)
    wrong = sha256(b"something else")
    job = run_exec(queue, {"url": url, "sha256": wrong}, max_attempts=3)
    assert job["status"] == "failed"
    assert job["attempts"] == 1
    assert "solver_checksum_mismatch" in job["last_error"]
    assert [
        p.name for p in (cache_dir / "artifacts").iterdir() if not p.name.endswith(".lock")
    ] == []


def test_download_errors_retry(
    queue: Queue, file_server: FileServer, make_solver: MakeSolver
) -> None:
    data, digest = make_solver("print(json.dumps('ok'))")
    url = file_server.add("/solver", data)
    file_server.status["/solver"] = 503
    job = run_exec(queue, {"url": url, "sha256": digest}, max_attempts=2)
    assert job["status"] == "failed"
    assert job["attempts"] == 2  # retried once
    assert "DownloadFailed" in job["last_error"] and "503" in job["last_error"]
    del file_server.status["/solver"]
    assert run_exec(queue, {"url": url, "sha256": digest})["result"] == "ok"


def test_exec_non_zero_exit_retries_with_stderr(
    queue: Queue, file_server: FileServer, make_solver: MakeSolver
) -> None:
    data, digest = make_solver("print('bad input', file=sys.stderr); sys.exit(4)")
    job = run_exec(queue, {"url": file_server.add("/s", data), "sha256": digest}, max_attempts=2)
    assert job["status"] == "failed" and job["attempts"] == 2
    assert "exit code 4" in job["last_error"] and "bad input" in job["last_error"]


def test_exec_timeout_kills_the_process(
    queue: Queue, file_server: FileServer, make_solver: MakeSolver
) -> None:
    data, digest = make_solver("time.sleep(30)")
    job = run_exec(
        queue, {"url": file_server.add("/s", data), "sha256": digest}, max_attempts=1, timeout=0.5
    )
    assert job["status"] == "failed"
    assert "timed out" in job["last_error"] or "max_runtime_exceeded" in job["last_error"]


def test_exec_without_url_off_an_agent_fails_clearly(queue: Queue) -> None:
    job = run_exec(queue, {"sha256": sha256(b"x")})
    assert job["status"] == "failed"
    assert "no url" in job["last_error"]


def test_cache_verifies_and_stores_atomically(file_server: FileServer, cache_dir: Path) -> None:
    data = b"#!/bin/sh\necho hi\n"
    url = file_server.add("/x", data)
    source = ArtifactSource(ArtifactCache(cache_dir))
    path = source.executable(sha256(data), url)
    assert path.read_bytes() == data
    assert path.stat().st_mode & 0o111
    with pytest.raises(ChecksumMismatch):
        ArtifactSource(ArtifactCache(cache_dir / "other")).executable(sha256(b"nope"), url)
    file_server.status["/missing"] = 500
    with pytest.raises(DownloadFailed):
        source.executable(sha256(b"missing"), file_server.url + "/missing")


RACER = textwrap.dedent(
    """
    import sys
    from jobcore_agent.cache import ArtifactCache
    from jobcore_agent.exec_job import ArtifactSource
    cache = ArtifactCache(sys.argv[1])
    path = ArtifactSource(cache).executable(sys.argv[2], sys.argv[3])
    print(cache.downloads, path)
    """
)


def test_two_agents_racing_for_one_cache_entry_download_it_once(
    file_server: FileServer, cache_dir: Path
) -> None:
    data = b"#!/bin/sh\n" + b"#" * 200_000 + b"\necho ok\n"
    url = file_server.add("/big", data)
    file_server.delay["/big"] = 0.5  # both racers are inside the download window together
    digest = sha256(data)
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(cache_dir), digest, url],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        outputs = [racer.communicate(timeout=60)[0].split() for racer in racers]
    finally:
        for racer in racers:  # a racer that hung is killed and reaped, not left running
            racer.kill()
            racer.communicate()
    assert all(racer.returncode == 0 for racer in racers)
    assert sorted(int(out[0]) for out in outputs) == [0, 1]  # one fetched, the other waited
    assert {out[1] for out in outputs} == {str(cache_dir / "artifacts" / digest)}
    assert file_server.hits["/big"] == 1
    assert (cache_dir / "artifacts" / digest).read_bytes() == data
    leftovers = [p.name for p in (cache_dir / "artifacts").iterdir() if p.name.startswith(".")]
    assert leftovers == []
    json.dumps(outputs)


def test_a_relative_cache_dir_still_runs(
    file_server: FileServer,
    make_solver: MakeSolver,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    data, digest = make_solver("print(json.dumps('ran'))")
    path = ArtifactSource(ArtifactCache("rel-cache")).executable(
        digest, file_server.add("/s", data)
    )
    assert path.is_absolute() and path.parent == tmp_path / "rel-cache" / "artifacts"
