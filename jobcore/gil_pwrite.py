"""`pwrite` that keeps the GIL: for writes too small to be worth letting another thread in.

`os.pwrite` releases the GIL around the system call, as every blocking call in
`os` does. For an executor noting each start in its slot (`jobcore.start_slots`:
64 bytes into the page cache, a few microseconds) that release cost far more
than the write: the worker's loop thread, waiting for the GIL after each of its
SQLite calls, took it at once, and the executor then waited for it back. With
short jobs the two threads traded the GIL about once per job (~20,000 voluntary
context switches of the loop thread for 20,000 noop jobs; about 2,000 with this
call) and the loop's commits shrank to the few jobs an executor ran between two
trades.

libc's `pwrite` through `ctypes.PyDLL` runs with the GIL held. The price: while
such a write blocks, every thread of the process waits (the keeper's lease
extensions and signal handlers included). The slot file sits beside the
database on the same disk, whose stall also stops the worker's SQLite writes,
lease extensions among them; a write to a cached page takes microseconds. Where
the call cannot be had (no ctypes, no `pwrite` symbol, a 32-bit `off_t`, no
`os.pwrite` either), `pwrite` is `os.pwrite`, or raises OSError.
"""

from __future__ import annotations

import errno
import os
from typing import Any


def _libc_pwrite() -> tuple[Any, Any]:
    """libc's `pwrite` as a ctypes function that keeps the GIL, and ctypes' `get_errno`;
    (None, None) where this platform has none."""
    try:
        import ctypes

        if ctypes.sizeof(ctypes.c_long) != 8:  # off_t may be 32-bit
            return None, None
        call = ctypes.PyDLL(None, use_errno=True).pwrite  # PyDLL: the GIL is kept
    except (ImportError, OSError, AttributeError, TypeError, ValueError):
        return None, None  # no ctypes, no libc to search (Windows: TypeError), no symbol
    call.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_long)
    call.restype = ctypes.c_ssize_t
    return call, ctypes.get_errno


LIBC_PWRITE, _get_errno = _libc_pwrite()
"""The ctypes function `pwrite` calls (None where this platform has none)."""


def _held(fd: int, data: bytes, offset: int) -> int:
    """Write `data` at `offset` of `fd` without releasing the GIL; bytes written."""
    while True:  # a signal's Python handler runs between tries, as with os.pwrite
        written: int = LIBC_PWRITE(fd, data, len(data), offset)
        if written >= 0:
            return written
        code: int = _get_errno()
        if code != errno.EINTR:
            raise OSError(code, os.strerror(code))


def _unavailable(fd: int, data: bytes, offset: int) -> int:
    raise OSError(errno.ENOSYS, "pwrite is not available on this platform")


pwrite = _held if LIBC_PWRITE is not None else getattr(os, "pwrite", _unavailable)
"""Write `data` at `offset` of `fd`; the number of bytes written; OSError on failure."""
