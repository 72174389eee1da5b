"""files plugin: create_file / delete_file against real folders, links and the CLI."""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import jobcore_files
import pytest
from click.testing import CliRunner

from jobcore import InvalidPayload, Queue
from jobcore.cli import cli
from jobcore.testing import drain

MakeQueue = Callable[..., Queue]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "root"
    folder.mkdir()
    return folder


@pytest.fixture
def queue(jobcore_make_queue: MakeQueue, root: Path) -> Queue:
    return jobcore_make_queue(jobcore_files, plugin_settings={"files": {"root": str(root)}})


def run_one(
    queue: Queue, job_type: str, payload: dict[str, object], **options: object
) -> dict[str, object]:
    job = queue.enqueue(job_type, payload, **options).job
    drain(queue)
    return queue.get(job.id).to_json()


def test_create_file_writes_nested_paths_atomically(queue: Queue, root: Path) -> None:
    job = run_one(queue, "create_file", {"path": "a/b/c.txt", "content": "héllo\n"})
    assert job["status"] == "completed"
    assert (root / "a/b/c.txt").read_text() == "héllo\n"
    data = "héllo\n".encode()
    assert job["result"] == {
        "path": "a/b/c.txt",
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "written": True,
    }
    assert sorted(p.name for p in (root / "a/b").iterdir()) == ["c.txt"]  # no temp files left


def test_base64_content(queue: Queue, root: Path) -> None:
    blob = bytes(range(256))
    run_one(
        queue,
        "create_file",
        {"path": "blob.bin", "content": base64.b64encode(blob).decode(), "encoding": "base64"},
    )
    assert (root / "blob.bin").read_bytes() == blob


def test_rerun_with_identical_content_is_a_success(queue: Queue, root: Path) -> None:
    first = run_one(queue, "create_file", {"path": "same.txt", "content": "x"})
    again = run_one(queue, "create_file", {"path": "same.txt", "content": "x"})
    assert (first["status"], again["status"]) == ("completed", "completed")
    assert again["result"]["written"] is False  # type: ignore[index]


def test_different_content_without_overwrite_fails_permanently(queue: Queue, root: Path) -> None:
    (root / "taken.txt").write_text("original")
    job = run_one(queue, "create_file", {"path": "taken.txt", "content": "new"})
    assert job["status"] == "failed" and job["attempts"] == 1
    assert "taken.txt already exists with different content" in str(job["last_error"])
    assert (root / "taken.txt").read_text() == "original"
    job = run_one(queue, "create_file", {"path": "taken.txt", "content": "new", "overwrite": True})
    assert job["status"] == "completed" and (root / "taken.txt").read_text() == "new"


def test_io_failure_is_retried_then_fails_with_history(queue: Queue, root: Path) -> None:
    (root / "plainfile").write_text("I am not a folder")
    job = run_one(
        queue, "create_file", {"path": "plainfile/inside.txt", "content": "x"}, max_attempts=2
    )
    assert job["status"] == "failed" and job["attempts"] == 2
    assert all("NotADirectoryError" in entry["error"] for entry in job["errors"])  # type: ignore[union-attr]


@pytest.mark.parametrize("path", ["../escape.txt", "a/../../escape.txt", "/etc/passwd", ""])
def test_paths_outside_the_root_are_rejected_at_enqueue(queue: Queue, path: str) -> None:
    with pytest.raises(InvalidPayload, match="path"):
        queue.enqueue("create_file", {"path": path, "content": "x"})
    with pytest.raises(InvalidPayload, match="path"):
        queue.enqueue("delete_file", {"path": path})
    assert queue.list_jobs() == []


def test_absolute_path_inside_the_root_is_accepted(queue: Queue, root: Path) -> None:
    job = run_one(queue, "create_file", {"path": str(root / "abs.txt"), "content": "ok"})
    assert job["status"] == "completed" and (root / "abs.txt").read_text() == "ok"


def test_symlink_leading_out_fails_permanently(queue: Queue, root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "link").symlink_to(outside)
    (root / "filelink").symlink_to(tmp_path / "secret.txt")
    (tmp_path / "secret.txt").write_text("secret")
    for payload in (
        {"path": "link/x.txt", "content": "x"},
        {"path": "link/new/x.txt", "content": "x"},
    ):
        job = run_one(queue, "create_file", payload)
        assert job["status"] == "failed" and job["attempts"] == 1
        assert "PermanentError: link is a symlink" in str(job["last_error"])
    job = run_one(queue, "delete_file", {"path": "filelink"})
    assert job["status"] == "failed" and "filelink is a symlink" in str(job["last_error"])
    assert list(outside.iterdir()) == [] and (tmp_path / "secret.txt").read_text() == "secret"


def test_a_symlink_inside_the_root_is_not_followed_either(queue: Queue, root: Path) -> None:
    (root / "real").mkdir()
    (root / "real" / "kept.txt").write_text("kept")
    (root / "alias").symlink_to(root / "real")
    (root / "kept-link").symlink_to(root / "real" / "kept.txt")
    for job_type, payload in (
        ("create_file", {"path": "alias/x.txt", "content": "x"}),
        ("create_file", {"path": "kept-link", "content": "new", "overwrite": True}),
        ("delete_file", {"path": "alias/kept.txt"}),
        ("delete_file", {"path": "kept-link"}),
    ):
        job = run_one(queue, job_type, payload)
        assert job["status"] == "failed" and job["attempts"] == 1, job
        assert "is a symlink; files jobs never follow symlinks" in str(job["last_error"])
    assert sorted(p.name for p in (root / "real").iterdir()) == ["kept.txt"]
    assert (root / "kept-link").is_symlink() and (root / "real" / "kept.txt").read_text() == "kept"


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"path": "x", "content": "@@@", "encoding": "base64"}, "not valid base64"),
        ({"path": "x", "content": "x", "encoding": "latin-1"}, "encoding"),
        ({"path": "x"}, "content: Field required"),
        ({"path": "x", "content": "x", "mode": "0600"}, "mode: unknown field"),
    ],
)
def test_bad_payloads(queue: Queue, payload: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidPayload, match=message):
        queue.enqueue("create_file", payload)


def test_delete_file(queue: Queue, root: Path) -> None:
    (root / "old.txt").write_text("bye")
    assert run_one(queue, "delete_file", {"path": "old.txt"})["result"] == {
        "path": "old.txt",
        "deleted": True,
    }
    assert not (root / "old.txt").exists()
    again = run_one(queue, "delete_file", {"path": "old.txt"})  # idempotent re-run
    assert again["status"] == "completed" and again["result"] == {
        "path": "old.txt",
        "deleted": False,
    }
    strict = run_one(queue, "delete_file", {"path": "old.txt", "require_exists": True})
    assert strict["status"] == "failed" and strict["attempts"] == 1
    assert "does not exist" in str(strict["last_error"])


def test_reconcile_finds_missing_changed_and_resurrected_files(queue: Queue, root: Path) -> None:
    run_one(queue, "create_file", {"path": "kept.txt", "content": "same"})
    run_one(queue, "create_file", {"path": "gone.txt", "content": "x"})
    run_one(queue, "create_file", {"path": "edited.txt", "content": "v1"})
    (root / "back.txt").write_text("x")
    run_one(queue, "delete_file", {"path": "back.txt"})
    assert [problems for _, problems in queue.reconcile()] == []
    (root / "gone.txt").unlink()
    (root / "edited.txt").write_text("v2")
    (root / "back.txt").write_text("again")
    found = sorted(problem for _, problems in queue.reconcile() for problem in problems)
    assert found[0] == "back.txt exists again"
    assert found[1].startswith("edited.txt content differs")
    assert found[2] == "gone.txt is missing"


def test_cli_rejects_escape_and_writes_nothing(
    tmp_path: Path, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    env = {
        "JOBCORE_DB": str(tmp_path / "cli.db"),
        "JOBCORE_FILES_ROOT": str(root),
        "JOBCORE_LOAD_PLUGINS": "files",
    }
    result = CliRunner().invoke(
        cli, ["enqueue", "create_file", '{"path": "../x", "content": "x"}'], env=env
    )
    assert result.exit_code == 1 and result.stderr.startswith(
        "Error: path: '../x' is outside the files root"
    )
    assert not (tmp_path / "cli.db").exists()
    ok = CliRunner().invoke(
        cli, ["enqueue", "create_file", '{"path": "in.txt", "content": "x"}'], env=env
    )
    assert ok.exit_code == 0
    assert CliRunner().invoke(cli, ["run", "--until-empty"], env=env).exit_code == 0
    assert (root / "in.txt").read_text() == "x"


@pytest.mark.parametrize("missing", ["O_TMPFILE", "this process in /proc"])
def test_a_file_system_without_o_tmpfile_gets_named_temp_files_and_keeps_none(
    queue: Queue, root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, missing: str
) -> None:
    from jobcore_files import writer

    if missing == "O_TMPFILE":
        monkeypatch.setattr(writer, "_O_TMPFILE", 0)
    else:  # a /proc mounted for another process namespace: no entry for this one's fds
        monkeypatch.setattr(writer, "_PROC_FD", str(tmp_path))
    named: list[str] = []
    write_temp = writer._write_temp

    def counted(dir_fd: int, data: bytes, mode: int | None) -> str:
        named.append(write_temp(dir_fd, data, mode))
        return named[-1]

    monkeypatch.setattr(writer, "_write_temp", counted)
    assert run_one(queue, "create_file", {"path": "a/new.txt", "content": "1"})["status"] == (
        "completed"
    )
    replaced = run_one(
        queue, "create_file", {"path": "a/new.txt", "content": "2", "overwrite": True}
    )
    assert replaced["status"] == "completed" and (root / "a/new.txt").read_text() == "2"
    refused = run_one(queue, "create_file", {"path": "a/new.txt", "content": "3"})
    assert refused["status"] == "failed" and "already exists" in str(refused["last_error"])
    assert sorted(os.listdir(root / "a")) == ["new.txt"] and len(named) == 2
