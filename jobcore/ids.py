"""Time-sortable job ids (UUIDv7, RFC 9562), monotonic within a process."""

from __future__ import annotations

import os
import threading
import time

_lock = threading.Lock()
_last_ms = 0
_last_seq = 0


def new_id() -> str:
    """Return a UUIDv7 string; ids made later in this process sort after earlier ones."""
    global _last_ms, _last_seq
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last_ms:
            ms = _last_ms
            _last_seq += 1
            if _last_seq >= 1 << 12:  # sequence exhausted in this millisecond: borrow the next
                ms += 1
                _last_seq = 0
            noise = os.urandom(8)
        else:
            noise = os.urandom(10)
            _last_seq = int.from_bytes(noise[8:], "big") & 0x3FF  # leave headroom
        _last_ms = ms
        seq = _last_seq
    rand = int.from_bytes(noise[:8], "big") & ((1 << 62) - 1)
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76  # version 7
    value |= seq << 64  # rand_a carries a counter for in-millisecond ordering
    value |= 0b10 << 62  # RFC 9562 variant
    value |= rand
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
