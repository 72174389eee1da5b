"""files plugin: a worker killed (SIGKILL) in the middle of writing a file leaves nothing behind.

The worker is stopped (SIGSTOP) over and over until it is caught with a file in
the root open for writing, then killed there: no half-written temp file may
stay in the root, and every target holds its old content or its new one.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import time
from pathlib import Path

from filesenv import JOBCORE, Cli

JOBS = 16
SIZE = 700_000  # about the largest content a 1 MiB payload holds in base64


def writing_in(pid: int, root: Path) -> str | None:
    """A file below `root` that process `pid` has open for writing, if any."""
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            with open(f"/proc/{pid}/fdinfo/{fd}") as info:
                flags = int(info.read().split("flags:")[1].split()[0], 8)
        except (FileNotFoundError, IndexError):
            continue
        if target.startswith(f"{root}/") and flags & os.O_ACCMODE == os.O_WRONLY:
            return target
    return None


def stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] in ("T", "t")


def test_a_worker_killed_while_writing_leaves_no_temp_file(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    old = {f"f{i}": f"old {i}" for i in range(0, JOBS, 2)}  # the overwrites replace these
    for name, content in old.items():
        (root / name).write_text(content)
    new = {f"f{i}": os.urandom(SIZE) for i in range(JOBS)}
    cli = Cli(tmp_path, JOBCORE_FILES_ROOT=str(root))
    cli.enqueue_many(
        "create_file",
        [
            {
                "path": name,
                "content": base64.b64encode(data).decode(),
                "encoding": "base64",
                "overwrite": name in old,
            }
            for name, data in new.items()
        ],
    )
    worker = subprocess.Popen(
        [*JOBCORE, "run", "--concurrency", "2"],
        cwd=tmp_path,
        env=cli.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    caught = None
    try:
        deadline = time.monotonic() + 60
        while caught is None and worker.poll() is None and time.monotonic() < deadline:
            worker.send_signal(signal.SIGSTOP)
            while not stopped(worker.pid):
                time.sleep(0.0005)
            caught = writing_in(worker.pid, root)
            if caught is None:
                worker.send_signal(signal.SIGCONT)
                time.sleep(0.001)
    finally:
        worker.kill()  # SIGKILL, still stopped when caught writing
        worker.wait()
    assert caught is not None, "the worker was never caught writing"
    for entry in os.listdir(root):
        assert entry in sorted(new), f"{entry} left in the root by the killed worker"
        content = (root / entry).read_bytes()
        assert content in (new[entry], old.get(entry, "").encode()), f"{entry} is half written"
