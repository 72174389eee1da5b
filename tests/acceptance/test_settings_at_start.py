"""Every setting, core and plugin, is checked when a process starts: one `Error:` line
naming it, before any job is touched; `log_level` and `JOBCORE_CONFIG` work like the rest."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from testenv import subprocess_env

JOBCORE = [sys.executable, "-m", "jobcore"]


def run(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*JOBCORE, *args],
        cwd=cwd,
        env=subprocess_env(**env),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("JOBCORE_CLAUDE_BACKEND", "bogus"),
        ("JOBCORE_FILES_RESOLVE", "bogus"),
        ("JOBCORE_HTTP_PORT", "99999"),
        ("JOBCORE_AGENT_CONCURRENCY", "0"),
        ("JOBCORE_POSTGRES_POOL_MAX", "0"),
    ],
)
def test_a_bad_plugin_setting_stops_the_worker_at_start(
    tmp_path: Path, variable: str, value: str
) -> None:
    assert run(tmp_path, "enqueue", "noop").returncode == 0
    done = run(tmp_path, "run", "--until-empty", **{variable: value})
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("Error: "), done.stderr
    assert variable in done.stderr and done.stderr.count("\n") == 1, done.stderr
    listed = run(tmp_path, "list", "--json")
    assert '"status": "pending"' in listed.stdout  # no job was claimed, none failed


@pytest.mark.parametrize(
    ("plugin", "line"),
    [("claude", 'backend = "bogus"'), ("aws", "region = 5"), ("dlq", "nosuch = 1")],
)
def test_a_bad_plugin_setting_in_the_config_file_is_named_with_the_file(
    tmp_path: Path, plugin: str, line: str
) -> None:
    (tmp_path / "jobcore.toml").write_text(f"[plugins.{plugin}]\n{line}\n")
    done = run(tmp_path, "enqueue", "noop")
    assert done.returncode == 1
    name = line.split()[0]
    assert done.stderr.startswith(
        f"Error: bad setting {name!r} from jobcore.toml [plugins.{plugin}]"
    )
    assert not (tmp_path / "jobcore.db").exists()


def test_log_level_from_the_config_file_the_environment_and_the_option(tmp_path: Path) -> None:
    assert "INFO" in run(tmp_path, "enqueue", "noop").stderr  # the default: info
    (tmp_path / "jobcore.toml").write_text('[jobcore]\nlog_level = "error"\n')
    assert run(tmp_path, "enqueue", "noop").stderr == ""
    assert "INFO" in run(tmp_path, "--log-level", "info", "enqueue", "noop").stderr
    assert "INFO" in run(tmp_path, "enqueue", "noop", JOBCORE_LOG_LEVEL="INFO").stderr
    bad = run(tmp_path, "enqueue", "noop", JOBCORE_LOG_LEVEL="loud")
    assert bad.returncode == 1 and "JOBCORE_LOG_LEVEL" in bad.stderr, bad.stderr


def test_jobcore_config_names_the_config_file(tmp_path: Path) -> None:
    config = tmp_path / "etc" / "queue.toml"
    config.parent.mkdir()
    config.write_text(f'[jobcore]\ndb = "{tmp_path / "other.db"}"\n')
    assert run(tmp_path, "enqueue", "noop", JOBCORE_CONFIG=str(config)).returncode == 0
    assert (tmp_path / "other.db").exists() and not (tmp_path / "jobcore.db").exists()
    missing = run(tmp_path, "enqueue", "noop", JOBCORE_CONFIG=str(tmp_path / "nope.toml"))
    assert missing.returncode == 1
    assert missing.stderr == f"Error: config file {tmp_path / 'nope.toml'} does not exist\n"
    # --config wins over JOBCORE_CONFIG
    other = tmp_path / "other.toml"
    other.write_text(f'[jobcore]\ndb = "{tmp_path / "third.db"}"\n')
    done = run(tmp_path, "--config", str(other), "enqueue", "noop", JOBCORE_CONFIG=str(config))
    assert done.returncode == 0 and (tmp_path / "third.db").exists()
