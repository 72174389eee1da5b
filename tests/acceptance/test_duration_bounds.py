"""Issue 22.7: every source of a duration has the CLI's bounds (1ms, or 0, to 100 years).

A bad one is one `Error:` line at start naming the setting and where it came from;
nothing runs and nothing is written.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import jobcore_test_plugin as tp
import pytest
from testenv import subprocess_env

from jobcore import Config, ConfigError, Worker, hookimpl
from jobcore.errors import JobcoreError
from jobcore.registry import JobType, Payload
from jobcore.testing import make_queue

JOBCORE = [sys.executable, "-m", "jobcore"]


def _run(tmp: Path, *args: str, config: str = "", **env: str) -> subprocess.CompletedProcess[str]:
    if config:
        (tmp / "jobcore.toml").write_text(config)
    return subprocess.run(
        [*JOBCORE, "--db", str(tmp / "jobs.db"), *args],
        env=subprocess_env(**env),
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("config", "env", "setting", "source"),
    [
        ("[jobcore]\nlease = inf\n", {}, "lease", "jobcore.toml [jobcore]"),
        ("[jobcore]\ntimeout = 1e30\n", {}, "timeout", "jobcore.toml [jobcore]"),
        ("[types.noop]\ntimeout = 1e30\n", {}, "timeout", "jobcore.toml [types.noop]"),
        ("", {"JOBCORE_TIMEOUT": "1" + "0" * 29}, "timeout", "JOBCORE_TIMEOUT"),
        ("", {"JOBCORE_LEASE": "0.0001"}, "lease", "JOBCORE_LEASE"),
        ("[plugins.dlq]\nnotify_timeout = inf\n", {}, "notify_timeout", "[plugins.dlq]"),
    ],
)
@pytest.mark.parametrize("command", [("run", "--until-empty"), ("enqueue", "noop", "{}")])
def test_an_out_of_range_duration_is_one_error_line_at_start(
    tmp_path: Path,
    config: str,
    env: dict[str, str],
    setting: str,
    source: str,
    command: tuple[str, ...],
) -> None:
    done = _run(tmp_path, *command, config=config, **env)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr
    assert repr(setting) in lines[0] and source in lines[0] and "100 years" in lines[0]
    assert not (tmp_path / "jobs.db").exists()  # nothing written


def test_the_python_api_has_the_same_bounds(tmp_path: Path) -> None:
    queue = make_queue(tmp_path / "jobs.db")
    for options in ({"lease": float("inf")}, {"poll_interval": 1e30}, {"shutdown_timeout": -1.0}):
        with pytest.raises(ConfigError, match="100 years"):
            Worker(queue, **options)
    with pytest.raises(ConfigError, match=r"'lease'.*100 years"):
        Config(env={}, options={"lease": float("inf")})
    queue.close()


class Forever:
    """A plugin whose job type's default timeout is out of range."""

    @hookimpl
    def jobcore_register_job_types(self, register: Callable[[JobType], None]) -> None:
        register(JobType(name="forever", payload_model=Payload, handler=tp.record, timeout=1e30))


def test_a_job_type_default_out_of_range_is_refused_naming_type_and_plugin(
    tmp_path: Path,
) -> None:
    """Like any plugin failing to register: unavailable, with the reason (`jobcore plugins`)."""
    queue = make_queue(tmp_path / "jobs.db", Forever())
    assert "forever" not in queue.registry
    [reason] = [info.reason for name, info in queue.pm.infos.items() if name.startswith("Forever")]
    assert reason is not None
    assert "'forever'" in reason and "timeout" in reason and "100 years" in reason
    with pytest.raises(JobcoreError):
        queue.job_type("forever")
