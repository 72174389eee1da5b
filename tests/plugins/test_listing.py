"""`jobcore plugins` lists every first-party plugin; a missing extra makes one unavailable, not the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from jobcore.cli import cli

FIRST_PARTY = {
    "files": ["create_file", "delete_file"],
    "shell": ["shell"],
    "claude": ["claude_extraction"],
    "aws": ["sync_aws"],
}

BLOCK_BOTO3 = """
import sys, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "boto3" or name.startswith("boto3."):
            raise ModuleNotFoundError("No module named 'boto3'", name="boto3")
sys.meta_path.insert(0, Block())
from jobcore.cli import main
main(sys.argv[1:])
"""


def test_every_first_party_plugin_is_listed(tmp_path: Path, monkeypatch: object) -> None:
    result = CliRunner().invoke(
        cli, ["plugins", "--json"], env={"JOBCORE_DB": str(tmp_path / "x.db")}
    )
    assert result.exit_code == 0, result.output
    listed = {p["name"]: p for p in json.loads(result.stdout)}
    for name, job_types in FIRST_PARTY.items():
        assert listed[name]["status"] == "loaded", listed[name]
        assert listed[name]["job_types"] == job_types
        assert listed[name]["version"]
    text = CliRunner().invoke(cli, ["plugins"], env={"JOBCORE_DB": str(tmp_path / "x.db")}).stdout
    assert "create_file, delete_file" in text


def test_missing_extra_is_reported_and_the_cli_still_works(tmp_path: Path) -> None:
    env = {"JOBCORE_DB": str(tmp_path / "x.db"), "PATH": "/usr/bin:/bin"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", BLOCK_BOTO3, *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=60,
        )

    listed = {p["name"]: p for p in json.loads(run("plugins", "--json").stdout)}
    assert listed["aws"]["status"] == "unavailable"
    assert "No module named 'boto3'" in listed["aws"]["reason"]
    assert "pip install" in listed["aws"]["reason"]
    assert listed["files"]["status"] == "loaded"
    assert run("enqueue", "create_file", '{"path": "a.txt", "content": "x"}').returncode == 0
    unknown = run("enqueue", "sync_aws", '{"resource_type": "s3_bucket", "resource_id": "b"}')
    assert unknown.returncode == 1 and "unknown job type 'sync_aws'" in unknown.stderr
    assert (
        "unavailable: No module named 'boto3'" in run("plugins").stdout
        or "boto3" in run("plugins").stdout
    )
