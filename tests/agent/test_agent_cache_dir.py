"""An unusable cache dir or a corrupt outbox: one `Error:` line naming it and the fix, exit 1."""

from __future__ import annotations

import subprocess
from pathlib import Path

from hubenv import JOBCORE, env


def start_agent(tmp_path: Path, cache_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*JOBCORE, "agent", "--hub", "http://127.0.0.1:9", "--cache-dir", str(cache_dir)],
        cwd=tmp_path,
        env=env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_corrupt_outbox_is_named_with_the_fix(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    garbage = b"SQLite format 3\x00" + bytes(range(256)) * 64
    (cache / "outbox.db").write_bytes(garbage)
    done = start_agent(tmp_path, cache)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr
    assert str(cache / "outbox.db") in lines[0] and "move it aside" in lines[0]
    assert "jobcore.db" not in lines[0]  # not the --db the agent does not use
    assert (cache / "outbox.db").read_bytes() == garbage


def test_an_unusable_cache_dir_is_one_error_line(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    cache = tmp_path / "a-file" / "cache"
    done = start_agent(tmp_path, cache)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"Error: cannot use the cache dir {cache}: Not a directory; "
        "pass --cache-dir (or JOBCORE_AGENT_CACHE_DIR) a writable folder"
    ]
