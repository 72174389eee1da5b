"""files plugin: a folder swapped for a symlink while jobs run never lets a job out of the root.

A thread exchanges `root/d` (a real folder) and `root/l` (a symlink to a folder
outside the root) with `renameat2(RENAME_EXCHANGE)` as fast as it can, while a
real worker process runs many `create_file` (new and replacing) and `delete_file`
jobs on paths in `d/`. Whatever each job saw, nothing outside the root is created,
replaced or deleted.
Both walks are run: `openat2` (where the kernel has it) and the O_NOFOLLOW walk.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections import Counter
from pathlib import Path

import pytest
from filesenv import Cli
from jobcore_files.confined import openat2

AT_FDCWD = -100
RENAME_EXCHANGE = 2
JOBS = 150

_libc = ctypes.CDLL(None, use_errno=True)


class Swapper(threading.Thread):
    """Keeps exchanging two names until stopped; counts the exchanges."""

    def __init__(self, first: Path, second: Path) -> None:
        super().__init__(daemon=True)
        self.names = (os.fsencode(first), os.fsencode(second))
        self.stop = threading.Event()
        self.swaps = 0

    def run(self) -> None:
        first, second = self.names
        while not self.stop.is_set():
            if _libc.renameat2(AT_FDCWD, first, AT_FDCWD, second, RENAME_EXCHANGE) != 0:
                raise OSError(ctypes.get_errno(), "renameat2 failed")
            self.swaps += 1

    def finish(self) -> None:
        self.stop.set()
        self.join()


@pytest.mark.stress
@pytest.mark.parametrize("resolve", ["openat2", "walk"])
def test_a_racing_symlink_swap_never_creates_or_deletes_outside_the_root(
    tmp_path: Path, resolve: str
) -> None:
    if resolve == "openat2" and not openat2.available:
        pytest.skip("this kernel has no openat2")
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "d").mkdir(parents=True)
    outside.mkdir()
    (root / "l").symlink_to(outside)
    for i in range(JOBS):
        for name in (f"v{i}", f"r{i}"):
            (outside / name).write_text("outside: keep")
            (root / "d" / name).write_text("inside: may go")
    cli = Cli(tmp_path, JOBCORE_FILES_ROOT=str(root), JOBCORE_FILES_RESOLVE=resolve)
    cli.enqueue_many(
        "create_file",
        [{"path": f"d/new{i}", "content": "x"} for i in range(JOBS)]
        + [{"path": f"d/sub{i}/new", "content": "x"} for i in range(JOBS)]
        + [{"path": f"d/r{i}", "content": "replaced", "overwrite": True} for i in range(JOBS)],
        "--max-attempts",
        "1",
    )
    cli.enqueue_many(
        "delete_file", [{"path": f"d/v{i}"} for i in range(JOBS)], "--max-attempts", "1"
    )
    swapper = Swapper(root / "d", root / "l")
    swapper.start()
    try:
        cli.drain("--concurrency", "4", timeout=120)
    finally:
        swapper.finish()
    jobs = list(cli.jobs().values())
    # what the jobs saw, shown by any assertion below that fails
    seen = Counter((job["status"], job["attempts"], (job["last_error"] or "")[:80]) for job in jobs)
    expected = sorted(name for i in range(JOBS) for name in (f"v{i}", f"r{i}"))
    assert sorted(p.name for p in outside.iterdir()) == expected, seen
    assert {p.read_text() for p in outside.iterdir()} == {"outside: keep"}, seen  # none replaced
    refused = [job for job in jobs if job["status"] == "failed"]
    assert swapper.swaps > 1000, (swapper.swaps, seen)
    assert refused, f"the swap never hit a job: the test proved nothing ({seen})"
    for job in refused:
        assert job["attempts"] == 1, seen  # permanent at once, naming the component
        assert job["last_error"].startswith("PermanentError: d is a symlink"), seen
    assert any(job["status"] == "completed" for job in jobs), seen
