"""`jobcore.gil_pwrite`: an executor's start note keeps the GIL (no trade with the loop
thread per job) and still writes, and fails, as `os.pwrite` does."""

from __future__ import annotations

import ctypes
import errno
import importlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from jobcore import gil_pwrite, start_slots
from jobcore.start_slots import StartSlots

held = pytest.mark.skipif(gil_pwrite.LIBC_PWRITE is None, reason="no GIL-keeping pwrite here")


@held
def test_the_write_is_libc_pwrite_called_with_the_gil_kept() -> None:
    assert gil_pwrite.pwrite is gil_pwrite._held
    # PyDLL functions carry FUNCFLAG_PYTHONAPI: ctypes calls them without releasing the GIL
    assert gil_pwrite.LIBC_PWRITE._flags_ & ctypes._FUNCFLAG_PYTHONAPI


def test_a_start_note_goes_through_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, bytes, int]] = []
    real = gil_pwrite.pwrite

    def recording(fd: int, data: bytes, offset: int) -> int:
        calls.append((fd, data, offset))
        return real(fd, data, offset)

    monkeypatch.setattr(gil_pwrite, "pwrite", recording)
    db = str(tmp_path / "jobs.db")
    slots = StartSlots(db, "w")
    try:
        assert slots.note("lease", 7) == 0
        assert slots.note("other", 8) == 1
    finally:
        slots.close()
    assert [(data, offset) for _, data, offset in calls] == [
        (start_slots.encode("lease", 7), 0),
        (start_slots.encode("other", 8), start_slots.SLOT),
    ]


@pytest.fixture
def long_switch_interval() -> Iterator[None]:
    """Another thread gets the GIL only when its holder lets it go (or after 1 s)."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1.0)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def spins_during(call: Callable[[], object], times: int) -> int:
    """How often a spinning thread ran while this one made `times` calls of `call`
    (0 when `call` keeps the GIL; a call that lets it go may or may not show)."""
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
            call()
        return counter[0] - before
    finally:
        stop.set()
        thread.join()


@held
def test_a_start_note_lets_no_other_thread_run(tmp_path: Path, long_switch_interval: None) -> None:
    slots = StartSlots(str(tmp_path / "jobs.db"), "w")
    try:
        assert spins_during(lambda: slots.note("lease", 1), 20) == 0
    finally:
        slots.close()


def test_it_writes_what_os_pwrite_writes(tmp_path: Path) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for path, write in ((ours, gil_pwrite.pwrite), (theirs, os.pwrite)):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            assert write(fd, b"abc\n", 130) == 4
            assert write(fd, b"\0" * 3 + b"z", 0) == 4  # NUL bytes are written, not an end
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
    fd = os.open(tmp_path / "rw", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        for write in (gil_pwrite.pwrite, os.pwrite):  # libc answers a negative offset
            with pytest.raises(OSError) as raised:
                write(fd, b"x", -1)
            assert raised.value.errno == errno.EINVAL
    finally:
        os.close(fd)


def test_a_note_that_cannot_be_written_says_so_and_the_start_goes_to_the_database(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = str(tmp_path / "jobs.db")
    slots = StartSlots(db, "w")
    os.close(slots._fd)
    slots._fd = os.open(tmp_path / "ro", os.O_RDONLY | os.O_CREAT, 0o600)  # EBADF on write
    try:
        assert slots.note("lease", 1) is None
        assert "cannot write start slot" in caplog.text
        assert start_slots.read(db, "w") == {}
    finally:
        slots.close()


@pytest.fixture
def reloaded(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """A monkeypatch undone before `gil_pwrite` is loaded again, as this platform has it."""
    yield monkeypatch
    monkeypatch.undo()
    importlib.reload(gil_pwrite)


def test_where_libc_cannot_be_searched_it_is_os_pwrite(reloaded: pytest.MonkeyPatch) -> None:
    def no_libc(*args: object, **kwargs: object) -> None:
        raise TypeError("argument of type 'NoneType' is not iterable")  # Windows' PyDLL(None)

    reloaded.setattr(ctypes, "PyDLL", no_libc)
    importlib.reload(gil_pwrite)
    assert gil_pwrite.LIBC_PWRITE is None
    assert gil_pwrite.pwrite is os.pwrite


def test_without_any_pwrite_a_note_fails_and_the_start_goes_to_the_database(
    tmp_path: Path, reloaded: pytest.MonkeyPatch
) -> None:
    reloaded.setattr(ctypes, "PyDLL", None)  # any failure: no GIL-keeping call
    reloaded.delattr(os, "pwrite")  # as on Windows
    importlib.reload(gil_pwrite)
    with pytest.raises(OSError) as raised:
        gil_pwrite.pwrite(0, b"x", 0)
    assert raised.value.errno == errno.ENOSYS
    slots = StartSlots(str(tmp_path / "jobs.db"), "w")
    try:
        assert slots.note("lease", 1) is None
    finally:
        slots.close()
