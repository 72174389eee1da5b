"""Settings precedence and errors that name the setting and its source."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from jobcore import Config, ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "jobcore.toml"
    path.write_text(text)
    return path


def test_defaults() -> None:
    core = Config(env={}).core
    assert (core.db, core.synchronous, core.lease, core.max_attempts) == (
        "jobcore.db",
        "FULL",
        60.0,
        3,
    )
    assert (core.backoff_base, core.backoff_cap, core.shutdown_timeout) == (1.0, 300.0, 30.0)
    assert core.max_payload_bytes == 1024 * 1024


def test_precedence_option_over_env_over_file(tmp_path: Path) -> None:
    path = write(tmp_path, '[jobcore]\nlease = "2m"\nmax_attempts = 7\nsynchronous = "NORMAL"\n')
    config = Config.load(
        path, env={"JOBCORE_LEASE": "30s", "JOBCORE_MAX_ATTEMPTS": "5"}, options={"lease": 10.0}
    )
    assert config.core.lease == 10.0
    assert config.core.max_attempts == 5
    assert config.core.synchronous == "NORMAL"


def test_bad_value_names_setting_and_source(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"'lease' from JOBCORE_LEASE"):
        Config(env={"JOBCORE_LEASE": "soon"})
    path = write(tmp_path, '[jobcore]\nsynchronous = "SOMETIMES"\n')
    with pytest.raises(ConfigError, match=r"'synchronous' from .*jobcore.toml \[jobcore\]"):
        Config.load(path, env={})
    with pytest.raises(ConfigError, match=r"'lease_time' from .*unknown setting"):
        Config.load(write(tmp_path, "[jobcore]\nlease_time = 3\n"), env={})


def test_missing_and_broken_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        Config.load(tmp_path / "nope.toml", env={})
    with pytest.raises(ConfigError, match="not valid TOML"):
        Config.load(write(tmp_path, "[jobcore\n"), env={})


def test_type_and_plugin_settings(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[types.shell]\nmax_attempts = 5\ntimeout = "10s"\n[plugins.files]\nroot = "/srv"\n',
    )
    config = Config.load(path, env={"JOBCORE_FILES_MODE": "strict"})

    class FilesSettings(BaseModel):
        root: str = "."
        mode: str = "lax"

    assert config.type_settings("shell").max_attempts == 5
    assert config.type_settings("shell").timeout == 10.0
    assert config.type_settings("other").max_attempts is None
    assert config.plugin_settings("files", FilesSettings) == FilesSettings(
        root="/srv", mode="strict"
    )
    with pytest.raises(ConfigError, match=r"\[types.shell\]"):
        Config.load(write(tmp_path, "[types.shell]\nmax_attempts = 0\n"), env={})
