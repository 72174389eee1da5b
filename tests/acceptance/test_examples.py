"""The examples run as written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from testenv import subprocess_env

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_example(name: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = subprocess_env()
    env.pop("JOBCORE_PLUGINS")
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_quickstart(tmp_path: Path) -> None:
    done = run_example("quickstart.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "completed 3, failed 1, scheduled 1" in done.stdout
    assert "created=False" in done.stdout
    assert (tmp_path / "jobcore.db").exists()


def test_outbox_app(tmp_path: Path) -> None:
    done = run_example("outbox_app.py", str(tmp_path / "app.db"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "users: ['ada@example.com']" in done.stdout
    assert "jobs: [('send_welcome', 'ada@example.com', 'pending')]" in done.stdout
    assert "welcome-1.txt: To: ada@example.com" in done.stdout
