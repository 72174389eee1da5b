"""Schemathesis against `/openapi.json` of a real hub: no 5xx, answers match the schema."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hubproc import Hub, make_tokens
from testenv import subprocess_env

SCHEMATHESIS = shutil.which("schemathesis", path=str(Path(sys.executable).parent))


@pytest.mark.slow
@pytest.mark.skipif(SCHEMATHESIS is None, reason="schemathesis is not installed (test extra)")
def test_every_route_with_generated_input(tmp_path: Path) -> None:
    db = tmp_path / "schema.db"
    # long-polls end at once here: generated `wait` values would otherwise hold each case
    hub = Hub(db, env=subprocess_env(JOBCORE_HTTP_MAX_WAIT="0.1"))
    try:
        done = _schemathesis(hub, make_tokens(hub, db).admin, tmp_path)
    finally:
        code = hub.terminate()
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert code == 0
    assert "internal error" not in hub.output()


def _schemathesis(hub: Hub, token: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(SCHEMATHESIS),
            "run",
            f"{hub.url}/openapi.json",
            "-H",
            f"Authorization: Bearer {token}",
            "--checks",
            "not_a_server_error,response_schema_conformance,status_code_conformance,"
            "content_type_conformance",
            "--phases",
            "examples,fuzzing",
            "--max-examples",
            "12",
            "--exclude-path-regex",
            "events$",  # endless streams; tested in test_events.py
            "--request-timeout",
            "40",
            "--seed",
            "1",
        ],
        env={**os.environ, "NO_COLOR": "1"},
        cwd=cwd,  # its reports folder goes there
        capture_output=True,
        text=True,
        timeout=600,
    )
