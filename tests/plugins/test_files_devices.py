"""files plugin: a device, socket or FIFO at a target is never opened for reading.

An entry is held with `O_PATH` and looked at before anything is opened, so a
terminal never becomes a session leader's controlling terminal, a socket is
a permanent failure that says so, and every open carries `O_NOCTTY`.
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from filesenv import Cli
from jobcore_files import confined, write_file
from jobcore_files.writer import Place, digest_place, sha256
from testenv import subprocess_env

from jobcore import PermanentError
from jobcore.config import Config

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux ptys and /proc")

# A session leader without a controlling terminal (as a worker under systemd or `setsid`):
# a file job at a terminal, then the process's tty_nr (0: still no controlling terminal).
SESSION_LEADER = """
import sys
from jobcore import PermanentError
from jobcore.config import Config
from jobcore_files import confined, write_file
from jobcore_files.writer import Place, digest_place

def tty_nr():
    with open("/proc/self/stat") as handle:
        return int(handle.read().rsplit(")", 1)[1].split()[4])

print("before", tty_nr())
config = Config(env={"JOBCORE_FILES_ROOT": sys.argv[1]})
for attempt in (lambda: write_file(config, sys.argv[2], b"x", overwrite=True),
                lambda: digest_place(Place.of(config, sys.argv[2]), 1)):
    try:
        attempt()
    except PermanentError as exc:
        print("refused", exc)
print("after", tty_nr())
"""


@pytest.fixture
def pty_name() -> Iterator[str]:
    leader, follower = os.openpty()
    try:
        yield os.ttyname(follower)
    finally:
        os.close(follower)
        os.close(leader)


def test_a_terminal_in_the_root_never_becomes_a_session_leaders_controlling_terminal(
    tmp_path: Path, pty_name: str
) -> None:
    folder, name = os.path.split(pty_name)  # the files root is /dev/pts
    done = subprocess.run(
        [sys.executable, "-c", SESSION_LEADER, folder, name],
        cwd=tmp_path,
        env=subprocess_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        start_new_session=True,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "before 0"
    refusal = f"refused {name} is a device, not a regular file; files jobs touch regular files only"
    assert lines[1:3] == [refusal, refusal]
    assert lines[3] == "after 0"  # opened without O_NOCTTY, the terminal had become its own


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "root"
    folder.mkdir()
    os.mkfifo(folder / "fifo")  # no writer: opening it for reading is what must not happen
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(folder / "app.sock"))
        yield folder


@pytest.mark.parametrize("held", ["O_PATH, reopened via /proc", "O_PATH, by name", "fstatat"])
def test_only_regular_files_are_ever_opened_for_reading_and_every_open_has_noctty(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held: str
) -> None:
    if held != "O_PATH, reopened via /proc":  # no /proc: the name again, checked to be the inode
        monkeypatch.setattr(confined, "_PROC_FD", str(tmp_path / "no-proc"))
    if held == "fstatat":  # no O_PATH (not Linux): the entry is looked at before it is opened
        monkeypatch.setattr(confined, "_O_PATH", 0)
        monkeypatch.setattr(confined, "_HOLD_FLAGS", 0)
    (root / "same.txt").write_text("x")
    opened: list[tuple[str, int, int]] = []
    real_open = os.open

    def spy(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        fd = real_open(path, flags, mode, dir_fd=dir_fd)
        opened.append((str(path), flags, os.fstat(fd).st_mode))
        return fd

    monkeypatch.setattr(os, "open", spy)
    config = Config(env={"JOBCORE_FILES_ROOT": str(root)})
    for name, kind in (("fifo", "a FIFO"), ("app.sock", "a socket")):
        refusal = f"{name} is {kind}, not a regular file"
        for overwrite in (False, True):
            with pytest.raises(PermanentError, match=refusal):
                write_file(config, name, b"x", overwrite=overwrite)
        with pytest.raises(PermanentError, match=refusal):
            digest_place(Place.of(config, name), 1)
    assert write_file(config, "same.txt", b"x", overwrite=False) is False  # read, found equal
    assert digest_place(Place.of(config, "same.txt"), 1) == (1, sha256(b"x"))
    monkeypatch.undo()

    def reads(flags: int) -> bool:
        return flags & os.O_ACCMODE == os.O_RDONLY and not flags & getattr(os, "O_PATH", 0)

    read = [(path, stat.filemode(mode)) for path, flags, mode in opened if reads(flags)]
    assert [entry for entry in read if entry[1][0] not in "-d"] == []
    files = [path for path, mode in read if mode[0] == "-"]
    assert len(files) == 2  # same.txt, compared and digested
    via_proc = held == "O_PATH, reopened via /proc"
    assert all(path.startswith("/proc/self/fd/") == via_proc for path in files), files
    assert [path for path, flags, _ in opened if not flags & os.O_NOCTTY] == []


def test_a_socket_target_fails_at_once_saying_so_with_a_real_worker(
    root: Path, tmp_path: Path
) -> None:
    cli = Cli(tmp_path, JOBCORE_FILES_ROOT=str(root))
    created = cli.enqueue(
        "create_file", {"path": "app.sock", "content": "x"}, "--max-attempts", "3"
    )
    deleted = cli.enqueue("delete_file", {"path": "app.sock"}, "--max-attempts", "3")
    cli.drain(timeout=30)
    jobs = cli.jobs()
    for job_id in (created, deleted):
        job = jobs[job_id]
        assert job["status"] == "failed" and job["attempts"] == 1, job  # not retried: ENXIO was
        assert job["last_error"].startswith(
            "PermanentError: app.sock is a socket, not a regular file"
        ), job
    assert stat.S_ISSOCK((root / "app.sock").lstat().st_mode)
