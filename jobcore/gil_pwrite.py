"""`pwrite` that keeps the GIL: for writes too small to be worth letting another thread in.

`os.pwrite` releases the GIL around the system call, as every blocking call in
`os` does. For an executor noting each start in its slot (`jobcore.start_slots`:
64 bytes into the page cache, about a microsecond) that release costs far more
than the write: the worker's loop thread, waiting for the GIL after each of its
SQLite calls, takes it at once, and the executor then waits for it back. With
short jobs the two threads traded the GIL about once per job (a futex wake and
two context switches each way, ~20,000 voluntary switches of the loop thread
for 20,000 noop jobs; about 2,000 with this call) and the loop's commits
shrank to the few jobs an executor ran between two trades.

libc's `pwrite` through `ctypes.PyDLL` runs with the GIL held. Where that
cannot be had (no ctypes, no `pwrite` symbol, a 32-bit `off_t`), `pwrite` is
`os.pwrite`.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable


def _held_pwrite() -> Callable[[int, bytes, int], int] | None:
    """libc's pwrite called with the GIL held, or None where it cannot be."""
    try:
        import ctypes
    except ImportError:  # pragma: no cover - a Python built without ctypes
        return None
    try:
        libc = ctypes.PyDLL(None, use_errno=True)  # PyDLL: the call keeps the GIL
        call = libc.pwrite
    except (OSError, AttributeError):  # pragma: no cover - no libc symbols to find
        return None
    if ctypes.sizeof(ctypes.c_long) != 8:  # pragma: no cover - off_t may be 32-bit
        return None
    call.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_long)
    call.restype = ctypes.c_ssize_t

    def pwrite(fd: int, data: bytes, offset: int) -> int:
        if offset < 0:
            raise ValueError("negative offset")
        while True:  # a signal's Python handler runs between tries, as with os.pwrite
            written: int = call(fd, data, len(data), offset)
            if written >= 0:
                return written
            code = ctypes.get_errno()
            if code != errno.EINTR:
                raise OSError(code, os.strerror(code))

    return pwrite


HELD: Callable[[int, bytes, int], int] | None = _held_pwrite()
"""The GIL-keeping call, or None where this platform has none (tests look)."""

pwrite: Callable[[int, bytes, int], int] = HELD or os.pwrite
"""Write `data` at `offset` of `fd`; the number of bytes written; OSError on failure."""
