"""Taking a secret out of the agent's environment, so that no job process can read it.

`os.environ.pop` removes it from what child processes inherit. On Linux the
kernel also keeps the environment the process started with, which
`/proc/<pid>/environ` shows to every process of the same user (a job reading
its parent's file): that copy is overwritten in place too.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys

log = logging.getLogger("jobcore.agent")


def forget(name: str) -> None:
    """Remove `name` from this process's environment, and its start-up copy on Linux."""
    startup = _startup_entries(name)
    os.environ.pop(name, None)
    for address, size in startup:
        ctypes.memset(address, 0, size)


def _startup_entries(name: str) -> list[tuple[int, int]]:
    """(address, length) of `NAME=…` entries that lie in the start-up environment block."""
    if not sys.platform.startswith("linux") or name not in os.environ:
        return []
    try:
        with open("/proc/self/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        # fields 50 and 51 of stat (counting from 1; [0] here is field 3): env_start, env_end
        start, end = int(fields[47]), int(fields[48])
        environ = ctypes.POINTER(ctypes.c_void_p).in_dll(ctypes.CDLL(None), "environ")
    except (OSError, ValueError, IndexError) as exc:
        log.debug("cannot locate the start-up environment: %s", exc)
        return []
    prefix = name.encode() + b"="
    found: list[tuple[int, int]] = []
    index = 0
    while address := environ[index]:
        entry = ctypes.string_at(address)
        if entry.startswith(prefix) and start <= address and address + len(entry) < end:
            found.append((address, len(entry)))
        index += 1
    return found
