"""files plugin: what is at a target (FIFO, symlink, mode, a long name), with real worker processes."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from filesenv import Cli


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "root"
    folder.mkdir()
    return folder


@pytest.fixture
def cli(tmp_path: Path, root: Path) -> Cli:
    return Cli(tmp_path, JOBCORE_FILES_ROOT=str(root))


def test_a_fifo_is_refused_at_once_and_nothing_blocks(cli: Cli, root: Path) -> None:
    os.mkfifo(root / "pipe")
    ids = [
        cli.enqueue("create_file", {"path": "pipe", "content": "x"}),
        cli.enqueue("create_file", {"path": "pipe", "content": "x", "overwrite": True}),
        cli.enqueue("delete_file", {"path": "pipe"}),
    ]
    cli.drain(timeout=30)  # the old writer blocked for good opening the FIFO
    jobs = cli.jobs()
    for job_id in ids:
        job = jobs[job_id]
        assert job["status"] == "failed" and job["attempts"] == 1, job
        assert "pipe is a FIFO, not a regular file" in job["last_error"]
    assert stat.S_ISFIFO((root / "pipe").lstat().st_mode)


def test_reconcile_never_blocks_on_a_fifo_nor_reads_through_a_symlink(
    cli: Cli, root: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    for path in ("fifo.txt", "sub/in.txt", "link.txt", "kept.txt"):
        cli.enqueue("create_file", {"path": path, "content": "same"})
    cli.drain()
    assert cli.reconcile() == (0, [])
    (root / "fifo.txt").unlink()
    os.mkfifo(root / "fifo.txt")
    (outside / "sub" / "in.txt").write_text("same")  # the same content, outside the root
    (outside / "link.txt").write_text("same")
    (root / "sub" / "in.txt").unlink()
    (root / "sub").rmdir()
    (root / "sub").symlink_to(outside / "sub")
    (root / "link.txt").unlink()
    (root / "link.txt").symlink_to(outside / "link.txt")
    code, lines = cli.reconcile()
    problems = sorted(line.split(": ", 1)[1] for line in lines)
    assert code == 1
    assert (
        problems[0] == "fifo.txt is a FIFO, not a regular file; files jobs touch regular files only"
    )
    assert problems[1].startswith("link.txt is a symlink; files jobs never follow symlinks")
    assert problems[2].startswith("sub is a symlink; files jobs never follow symlinks")
    assert len(problems) == 3


@pytest.mark.parametrize(("umask", "created"), [(0o022, 0o644), (0o077, 0o600)])
def test_new_files_get_0666_minus_umask_and_replaced_files_keep_their_mode(
    cli: Cli, root: Path, umask: int, created: int
) -> None:
    (root / "script.sh").write_text("#!/bin/sh\n")
    (root / "script.sh").chmod(0o755)
    (root / "shared.txt").write_text("v1")
    (root / "shared.txt").chmod(0o644)
    (root / "setuid").write_text("v1")
    (root / "setuid").chmod(0o4755)
    cli.umask = umask
    cli.enqueue("create_file", {"path": "new.txt", "content": "x"})
    cli.enqueue(
        "create_file", {"path": "script.sh", "content": "#!/bin/sh\necho\n", "overwrite": True}
    )
    cli.enqueue("create_file", {"path": "shared.txt", "content": "v2", "overwrite": True})
    cli.enqueue("create_file", {"path": "setuid", "content": "v2", "overwrite": True})
    cli.drain()
    assert stat.S_IMODE((root / "new.txt").stat().st_mode) == created
    assert stat.S_IMODE((root / "script.sh").stat().st_mode) == 0o755
    assert (root / "script.sh").read_text() == "#!/bin/sh\necho\n"
    assert stat.S_IMODE((root / "shared.txt").stat().st_mode) == 0o644
    assert (root / "shared.txt").read_text() == "v2"
    assert stat.S_IMODE((root / "setuid").stat().st_mode) == 0o755  # a job's content: no setuid


def test_a_legal_long_name_is_written_and_an_impossible_one_refused_at_enqueue(
    cli: Cli, root: Path
) -> None:
    longest = "n" * 251 + ".txt"  # 255 bytes: legal
    accented = "é" * 125  # 250 bytes in UTF-8
    for name in (longest, f"deep/{accented}"):
        cli.enqueue("create_file", {"path": name, "content": "x", "overwrite": True})
    cli.drain()
    assert (root / longest).read_text() == "x" and (root / "deep" / accented).read_text() == "x"
    assert {job["status"] for job in cli.jobs().values()} == {"completed"}
    assert sorted(os.listdir(root)) == sorted([longest, "deep"])  # no temp file left
    for path in ("m" * 256, f"ok/{'é' * 128}/x"):
        done = cli("enqueue", "create_file", json.dumps({"path": path, "content": "x"}))
        assert done.returncode == 1
        assert done.stderr.startswith("Error: path: the name"), done.stderr
        assert "at most 255 bytes per file or folder name" in done.stderr
    done = cli("enqueue", "delete_file", '{"path": "a\\u0000b"}')
    assert (
        done.returncode == 1 and "Error: path: must be a non-empty path without NUL" in done.stderr
    )
    assert len(cli.jobs()) == 2  # nothing written by the refused ones


def test_a_path_longer_than_path_max_is_refused_at_enqueue_and_at_run_time(
    cli: Cli, root: Path, tmp_path: Path
) -> None:
    deep = "/".join(["d" * 200] * 40) + "/f"  # 8 KB: every name legal, the whole path not
    done = cli("enqueue", "create_file", json.dumps({"path": deep, "content": "x"}))
    assert done.returncode == 1 and done.stderr.startswith("Error: path: "), done.stderr
    assert "a path may have at most 4095 bytes" in done.stderr
    # 3000 bytes fit below this root, but not below a worker's root 1100 bytes longer
    fits = "/".join(["e" * 200] * 15)
    job_id = cli.enqueue("create_file", {"path": fits, "content": "x"})
    longer = root.joinpath(*["r" * 250] * 4, "r" * 95)
    assert len(str(longer)) - len(str(root)) == 1100
    Cli(tmp_path, JOBCORE_FILES_ROOT=str(longer)).drain()
    job = cli.show(job_id)
    assert job["status"] == "failed" and job["attempts"] == 1, job
    assert "a path may have at most 4095 bytes" in job["last_error"]
    assert not longer.exists() or os.listdir(longer) == []  # no folder made on the way
    assert len(cli.jobs()) == 1 and os.listdir(root) == []


def test_reconcile_never_reads_through_a_huge_file_put_in_place_of_a_target(
    cli: Cli, root: Path
) -> None:
    cli.enqueue("create_file", {"path": "small.txt", "content": "mine"})
    cli.drain()
    os.truncate(root / "small.txt", 1 << 40)  # 1 TiB, sparse: reading it through takes minutes
    code, lines = cli.reconcile()  # 30 s at most
    assert code == 1 and f"small.txt content differs ({1 << 40} bytes, expected 4)" in lines[0]
