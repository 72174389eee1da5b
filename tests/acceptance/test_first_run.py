"""The README's first command runs `examples/first_run.sh`; the script works as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from testenv import subprocess_env

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "first_run.sh"


def readme_commands() -> list[str]:
    block = re.search(r"```sh[^\n]*\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert block is not None
    return block.group(1).strip().splitlines()


def test_the_readme_opens_with_two_commands_install_and_run_then_tests() -> None:
    install_and_run, tests = readme_commands()
    assert "pip install -e ." in install_and_run
    assert install_and_run.endswith("examples/first_run.sh")
    assert tests.endswith(".venv/bin/tox")


def test_first_run_script_drains_real_jobs_and_shows_stats(tmp_path: Path) -> None:
    env = subprocess_env()
    env.pop("JOBCORE_PLUGINS")  # only what a fresh install has
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    done = subprocess.run(
        ["sh", str(SCRIPT)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "jobcore.db").exists()  # the default database file
    assert (tmp_path / "jobcore-files" / "hello.txt").read_text() == "hello from jobcore\n"
    assert (tmp_path / "first-run" / "kernel.txt").read_text().strip()
    out = done.stdout
    assert out.rstrip().endswith(
        "hello from jobcore\nnext: jobcore list, jobcore show ID, jobcore retry --failed"
    )
    assert "finished: completed 3, retrying 2, failed 1" in out
    assert re.search(r"create_file\s+0\s+0\s+0\s+1\s+0\s+0", out)
    assert re.search(r"shell\s+0\s+0\s+0\s+2\s+1\s+0", out)
    assert "CommandFailed: exit code 2" in out  # why the one failure failed
    assert "retrying shell" in done.stderr and "exit code 75; stderr: not ready yet" in done.stderr
    assert "Traceback" not in done.stderr
