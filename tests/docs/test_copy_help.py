"""`jobcore copy --help` says what it leaves behind: hub tokens and agents."""

from __future__ import annotations

import subprocess
import sys

from testenv import subprocess_env


def test_copy_help_says_tokens_are_not_copied() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "jobcore", "copy", "--help"],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "Hub tokens and the agents registry are not copied" in " ".join(done.stdout.split())
