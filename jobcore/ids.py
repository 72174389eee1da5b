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
    return _format(ms, seq, int.from_bytes(noise[:8], "big"))


def new_ids(count: int) -> list[str]:
    """`count` ids, as from `count` calls of `new_id` (one lock and one random draw)."""
    global _last_ms, _last_seq
    if count <= 0:
        return []
    noise = os.urandom(8 * count + 2)
    stamps: list[tuple[int, int]] = []
    with _lock:
        ms = time.time_ns() // 1_000_000
        last_ms, seq = _last_ms, _last_seq
        if ms > last_ms:
            last_ms = ms
            seq = int.from_bytes(noise[-2:], "big") & 0x3FF  # leave headroom
        else:
            seq += 1
        for _ in range(count):
            if seq >= 1 << 12:  # sequence exhausted in this millisecond: borrow the next
                last_ms += 1
                seq = 0
            stamps.append((last_ms, seq))
            seq += 1
        _last_ms, _last_seq = last_ms, seq - 1
    return [
        _format(ms, seq, int.from_bytes(noise[8 * i : 8 * i + 8], "big"))
        for i, (ms, seq) in enumerate(stamps)
    ]


_FIXED = 0x7 << 76 | 0b10 << 62  # version 7, RFC 9562 variant
_MS_MASK = (1 << 48) - 1
_RAND_MASK = (1 << 62) - 1


def _format(ms: int, seq: int, rand: int) -> str:
    # rand_a carries `seq`, a counter for in-millisecond ordering
    h = f"{(ms & _MS_MASK) << 80 | seq << 64 | _FIXED | rand & _RAND_MASK:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
