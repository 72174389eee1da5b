"""A third-party plugin installed with pip into a fresh virtual environment, as users do."""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "jobcore-hello"


@pytest.mark.slow
def test_pip_installed_plugin_is_listed_and_runs(tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bin_dir = env_dir / "bin"
    install = subprocess.run(
        [
            str(bin_dir / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            str(ROOT),
            f"{EXAMPLE}[test]",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "JOBCORE_DB": str(tmp_path / "jobs.db"),
    }

    def jobcore(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(bin_dir / "jobcore"), *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=120,
        )

    listed = json.loads(jobcore("plugins", "--json").stdout)
    hello = next(p for p in listed if p["name"] == "hello")
    assert (
        hello["status"] == "loaded"
        and hello["version"] == "1.0.0"
        and hello["job_types"] == ["greet"]
    )
    greetings = tmp_path / "greetings.txt"
    enqueued = jobcore(
        "enqueue", "greet", json.dumps({"name": "Ada", "greetings_file": str(greetings)})
    )
    assert enqueued.returncode == 0, enqueued.stderr
    ran = jobcore("run", "--until-empty")
    assert ran.returncode == 0 and "completed 1" in ran.stdout
    assert greetings.read_text() == f"Hello, Ada! ({enqueued.stdout.strip()})\n"
    # the plugin's own test suite passes with jobcore's pytest fixtures
    tests = subprocess.run(
        [str(bin_dir / "python"), "-m", "pytest", "-q", str(EXAMPLE / "tests")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert tests.returncode == 0, tests.stdout[-3000:]
    assert sys.executable != str(bin_dir / "python")
