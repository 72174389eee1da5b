"""Undecodable input and misshapen config tables: one `Error:` line naming where (issue 22
item 17), through the real `jobcore` command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from testenv import subprocess_env

JOBCORE = [sys.executable, "-m", "jobcore"]


def jobcore(tmp_path: Path, *args: str, input: bytes | None = None) -> tuple[int, str]:
    done = subprocess.run(
        [*JOBCORE, "--db", str(tmp_path / "jobs.db"), *args],
        env=subprocess_env(),
        cwd=tmp_path,
        input=input,
        capture_output=True,
        timeout=60,
    )
    return done.returncode, done.stderr.decode()


def one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), stderr
    return lines[0]


def nothing_enqueued(tmp_path: Path) -> bool:
    if not (tmp_path / "jobs.db").exists():
        return True
    listed = subprocess.run(
        [*JOBCORE, "--db", str(tmp_path / "jobs.db"), "list", "--json"],
        env=subprocess_env(),
        capture_output=True,
        timeout=60,
    )
    return listed.returncode == 0 and json.loads(listed.stdout) == []


def test_a_non_utf8_line_of_from_is_named(tmp_path: Path) -> None:
    (tmp_path / "jobs.jsonl").write_bytes(b'{"seconds": 0}\n\n{"seconds": "\xff"}\n')
    code, stderr = jobcore(tmp_path, "enqueue", "noop", "--from", "jobs.jsonl")
    assert code == 1
    assert "jobs.jsonl line 3 is not UTF-8: byte 0xff" in one_error_line(stderr)
    assert nothing_enqueued(tmp_path)  # all lines or none


@pytest.mark.parametrize("source", ["@payload.json", "-"])
def test_a_non_utf8_payload_is_named(tmp_path: Path, source: str) -> None:
    data = b'{"seconds": "\xc3"}'
    (tmp_path / "payload.json").write_bytes(data)
    code, stderr = jobcore(tmp_path, "enqueue", "noop", source, input=data)
    where = "payload file payload.json" if source.startswith("@") else "payload from stdin"
    assert code == 1
    assert f"{where} is not UTF-8: byte 0xc3 at offset 13" in one_error_line(stderr)
    assert nothing_enqueued(tmp_path)


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("types = 3\n", "'types' in jobcore.toml must be a table"),
        ("[types]\nnoop = 3\n", "[types.noop] in jobcore.toml must be a table, not int 3"),
        ('plugins = "dlq"\n', "'plugins' in jobcore.toml must be a table"),
        ("[plugins]\ndlq = [1]\n", "[plugins.dlq] in jobcore.toml must be a table, not list"),
    ],
)
def test_a_config_section_that_is_not_a_table_is_named(
    tmp_path: Path, toml: str, message: str
) -> None:
    (tmp_path / "jobcore.toml").write_text(toml)
    for command in (["enqueue", "noop"], ["run", "--until-empty"]):
        code, stderr = jobcore(tmp_path, *command)
        assert code == 1 and message in one_error_line(stderr)
