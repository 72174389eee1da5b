"""Environment for `jobcore` subprocesses started by the tests."""

from __future__ import annotations

import os
from pathlib import Path

HELPERS = Path(__file__).parent


def subprocess_env(**extra: str) -> dict[str, str]:
    """Environment for `jobcore` subprocesses: the test plugin loaded, no stray JOBCORE_* vars."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBCORE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HELPERS), env.get("PYTHONPATH")]))
    env["JOBCORE_PLUGINS"] = "jobcore_test_plugin"
    env.update(extra)
    return env
