"""Every install hint fetches our own code: never `pip install jobcore…`, never a bare module name."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from jobcore.install import DISTRIBUTION, install_command, local_source

ROOT = Path(__file__).resolve().parents[2]

# run the CLI with some modules made unimportable, as in an install without their extra
BLOCKING_CLI = """
import os, sys, importlib.abc
blocked = os.environ["BLOCK_MODULES"].split(",")
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top in blocked:
            raise ModuleNotFoundError(f"No module named {top!r}", name=top)
sys.meta_path.insert(0, Block())
from jobcore.cli import main
main(sys.argv[1:])
"""

# what an install hint must never say: the index's `jobcore` is someone else's project
STRANGER = re.compile(r"pip install (-\S+ )*'?jobcore(\[|'|\s|$)")


def cli(tmp_path: Path, block: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {key: value for key, value in os.environ.items() if key != "JOBCORE_PLUGINS"}
    environ.update(JOBCORE_DB=str(tmp_path / "x.db"), BLOCK_MODULES=block, **env)
    return subprocess.run(
        [sys.executable, "-c", BLOCKING_CLI, *args],
        capture_output=True,
        text=True,
        env=environ,
        cwd=tmp_path,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("command", "block", "extra"),
    [
        ("serve", "fastapi", "http"),
        ("tokens", "fastapi", "http"),
        ("agent", "httpx", "agent"),
        ("artifacts", "httpx", "agent"),
    ],
)
def test_a_missing_first_party_command_names_its_extra(
    tmp_path: Path, command: str, block: str, extra: str
) -> None:
    done = cli(tmp_path, block, command, "--help")
    assert done.returncode == 2
    assert f"No such command '{command}'" in done.stderr
    assert f"{extra!r} extra: {install_command(extra)}" in done.stderr
    assert "Did you mean" not in done.stderr
    assert not STRANGER.search(done.stderr), done.stderr


def test_an_unknown_command_still_gets_clicks_answer(tmp_path: Path) -> None:
    done = cli(tmp_path, "nothing", "swep")
    assert done.returncode == 2
    assert "No such command 'swep'" in done.stderr and "extra" not in done.stderr


def test_copy_without_psycopg_names_the_postgres_extra(tmp_path: Path) -> None:
    done = cli(tmp_path, "psycopg,psycopg_pool", "copy", "--help")
    if done.returncode == 0:  # the command itself loads without psycopg; its use needs it
        done = cli(tmp_path, "psycopg,psycopg_pool", "--db", "postgresql://127.0.0.1/x", "stats")
        assert done.returncode == 1
    assert install_command("postgres") in done.stderr
    assert not STRANGER.search(done.stderr), done.stderr


def test_plugin_reasons_name_our_extra_never_the_bare_module(tmp_path: Path) -> None:
    done = cli(tmp_path, "opentelemetry,fastapi,httpx,boto3,anthropic", "plugins", "--json")
    assert done.returncode == 0, done.stderr
    listed = {p["name"]: p for p in json.loads(done.stdout)}
    for plugin in ("otel", "http", "agent", "aws", "claude"):
        reason = listed[plugin]["reason"]
        assert listed[plugin]["status"] == "unavailable"
        assert install_command(plugin) in reason, reason
        assert not STRANGER.search(reason), reason
    assert "pip install opentelemetry" not in listed["otel"]["reason"]


def test_a_plugin_module_not_found_is_named_without_an_install_suggestion(tmp_path: Path) -> None:
    done = cli(
        tmp_path, "nothing", "plugins", "--json", JOBCORE_PLUGINS="no_such_jobcore_plugin_here"
    )
    listed = {p["name"]: p for p in json.loads(done.stdout)}
    reason = listed["no_such_jobcore_plugin_here"]["reason"]
    assert "No module named 'no_such_jobcore_plugin_here'" in reason
    assert "not found" in reason and "pip install" not in reason


def test_the_distribution_has_a_name_of_its_own() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'name = "{DISTRIBUTION}"' in pyproject
    assert DISTRIBUTION != "jobcore"
    version = subprocess.run(
        [sys.executable, "-m", "jobcore", "--version"], capture_output=True, text=True, timeout=60
    )
    assert version.returncode == 0 and "version" in version.stdout


def test_hints_use_the_folder_or_file_pip_installed_from() -> None:
    editable = local_source('{"url": "file:///src/jobcore%20x", "dir_info": {"editable": true}}')
    assert editable == ("/src/jobcore x", True)
    assert local_source('{"url": "file:///src/jobcore", "dir_info": {}}') == ("/src/jobcore", False)
    wheel = local_source('{"url": "file:///d/jobcore_queue-0.1.0-py3-none-any.whl"}')
    assert wheel == ("/d/jobcore_queue-0.1.0-py3-none-any.whl", False)
    assert local_source('{"url": "https://example.org/x.whl", "archive_info": {}}') is None
    assert local_source("not json") is None
    command = install_command("http")
    assert command.startswith("pip install ") and "[http]" in command
    assert not STRANGER.search(command)


def test_no_document_or_message_tells_anyone_to_install_the_index_jobcore() -> None:
    offenders = []
    for folder in ("jobcore", "plugins", "docs", "examples", "benchmarks"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in {".py", ".md", ".sh", ".toml", ".html", ".txt"} and path.is_file():
                for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                    if STRANGER.search(line) or re.search(r"\bjobcore\[\w+", line):
                        offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    readme = (ROOT / "README.md").read_text().splitlines()
    offenders += [
        f"README.md:{n}: {line}" for n, line in enumerate(readme, 1) if STRANGER.search(line)
    ]
    assert not offenders, "\n".join(offenders)
