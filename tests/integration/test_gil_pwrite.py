"""`jobcore.gil_pwrite`: an executor's start note keeps the GIL (no trade with the loop
thread per job) and still writes, and fails, as `os.pwrite` does."""

from __future__ import annotations

import errno
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobcore import gil_pwrite, start_slots
from jobcore.start_slots import SLOT, StartSlots

pytestmark = pytest.mark.skipif(gil_pwrite.HELD is None, reason="no GIL-keeping pwrite here")


@pytest.fixture
def long_switch_interval() -> Iterator[None]:
    """Another thread gets the GIL only when its holder lets it go (or after 1 s: a margin for a loaded machine)."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1.0)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def spins_during(call: object, times: int) -> int:
    """How often a spinning thread ran while this one made `times` calls of `call`."""
    counter = [0]
    stop = threading.Event()
    spinning = threading.Event()

    def spin() -> None:
        spinning.set()
        while not stop.is_set():
            counter[0] += 1

    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    spinning.wait()
    try:
        before = counter[0]  # this thread has the GIL back from here on
        for _ in range(times):
            call()  # type: ignore[operator]
        return counter[0] - before
    finally:
        stop.set()
        thread.join()


def test_a_start_note_lets_no_other_thread_run(tmp_path: Path, long_switch_interval: None) -> None:
    slots = StartSlots(str(tmp_path / "jobs.db"), "w")
    try:
        assert spins_during(lambda: slots.note(0, "lease", 1), 5) == 0
    finally:
        slots.close()


def test_the_probe_sees_a_call_that_lets_the_gil_go(
    tmp_path: Path, long_switch_interval: None
) -> None:
    """The measure above can fail: `os.pwrite` (what notes used) hands the GIL over."""
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        assert spins_during(lambda: os.pwrite(fd, b"x" * SLOT, 0), 2) > 0
    finally:
        os.close(fd)


def test_it_writes_what_os_pwrite_writes(tmp_path: Path) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for path, write in ((ours, gil_pwrite.pwrite), (theirs, os.pwrite)):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            assert write(fd, b"abc\n", 130) == 4
            assert write(fd, b"\0" * 3 + b"z", 0) == 4
        finally:
            os.close(fd)
    assert ours.read_bytes() == theirs.read_bytes()
    assert len(ours.read_bytes()) == 134


def test_its_failures_are_oserrors_with_the_errno(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "ro", os.O_RDONLY | os.O_CREAT, 0o600)
    try:
        with pytest.raises(OSError) as raised:
            gil_pwrite.pwrite(fd, b"x", 0)
        assert raised.value.errno == errno.EBADF
    finally:
        os.close(fd)
    with pytest.raises(OSError) as raised:
        gil_pwrite.pwrite(fd, b"x", 0)  # closed
    assert raised.value.errno == errno.EBADF
    with pytest.raises(ValueError):
        gil_pwrite.pwrite(0, b"x", -1)


def test_a_note_that_cannot_be_written_says_so_and_the_start_goes_to_the_database(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = str(tmp_path / "jobs.db")
    slots = StartSlots(db, "w")
    os.close(slots._fd)
    slots._fd = os.open(tmp_path / "ro", os.O_RDONLY | os.O_CREAT, 0o600)  # EBADF on write
    try:
        assert slots.note(0, "lease", 1) is False
        assert "cannot write start slot" in caplog.text
        assert start_slots.read(db, "w") == {}
    finally:
        slots.close()
