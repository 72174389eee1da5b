"""Shared fixtures: the test plugin is importable here and in worker subprocesses."""

from __future__ import annotations

import os
import sys
from pathlib import Path

HELPERS = Path(__file__).parent / "helpers"
sys.path.insert(0, str(HELPERS))


def subprocess_env(**extra: str) -> dict[str, str]:
    """Environment for `jobcore` subprocesses: the test plugin loaded, no stray JOBCORE_* vars."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBCORE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HELPERS), env.get("PYTHONPATH")]))
    env["JOBCORE_PLUGINS"] = "jobcore_test_plugin"
    env.update(extra)
    return env
