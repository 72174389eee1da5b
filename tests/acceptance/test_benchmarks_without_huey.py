"""`python -m benchmarks` in a venv without Huey: one clear line, no traceback, no run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_benchmarks_say_huey_is_missing(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['huey'] = None\n"  # as if not installed
        "from benchmarks.runner import main\n"
        f"main(['--quick', '--out', {str(tmp_path)!r}])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert done.stderr.startswith("Error: ") and "Huey" in done.stderr, done.stderr
    assert "pip install huey" in done.stderr and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and list(tmp_path.iterdir()) == []
