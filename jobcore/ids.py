"""Time-sortable job ids (UUIDv7, RFC 9562), monotonic within a process."""

from __future__ import annotations

import os
import threading
import time

_lock = threading.Lock()
_last_ms = 0
_last_seq = 0
_SEQ_LIMIT = 1 << 12  # rand_a's 12 bits carry the in-millisecond counter


def new_id() -> str:
    """Return a UUIDv7 string; ids made later in this process sort after earlier ones."""
    global _last_ms, _last_seq
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last_ms:
            ms = _last_ms
            _last_seq += 1
            if _last_seq >= _SEQ_LIMIT:  # sequence exhausted in this millisecond: borrow the next
                ms += 1
                _last_seq = 0
            noise = os.urandom(8)
        else:
            noise = os.urandom(10)
            _last_seq = int.from_bytes(noise[8:], "big") & 0x3FF  # leave headroom
        _last_ms = ms
        seq = _last_seq
    return f"{_prefix(ms)}{seq:03x}-{_tail(noise.hex(), 0)}"


def new_ids(count: int) -> list[str]:
    """`count` ids, as from `count` calls of `new_id` (one lock and one random draw)."""
    global _last_ms, _last_seq
    if count <= 0:
        return []
    noise = os.urandom(8 * count + 2)
    with _lock:
        ms = time.time_ns() // 1_000_000
        first_ms, seq = _last_ms, _last_seq
        if ms > first_ms:
            first_ms = ms
            seq = int.from_bytes(noise[-2:], "big") & 0x3FF  # leave headroom
        else:
            seq += 1
        if seq >= _SEQ_LIMIT:  # sequence exhausted in this millisecond: borrow the next
            first_ms, seq = first_ms + 1, 0
        first_seq = seq
        # the last id's place: each millisecond holds _SEQ_LIMIT ids, then the next is borrowed
        carried, _last_seq = divmod(first_seq + count - 1, _SEQ_LIMIT)
        _last_ms = first_ms + carried
    hexed = noise.hex()
    ms, seq, prefix = first_ms, first_seq, _prefix(first_ms)
    ids = []
    for at in range(0, 16 * count, 16):
        if seq >= _SEQ_LIMIT:
            ms, seq = ms + 1, 0
            prefix = _prefix(ms)
        variant = _VARIANT[hexed[at]]  # `_tail`, inline: once per id
        ids.append(f"{prefix}{seq:03x}-{variant}{hexed[at + 1 : at + 4]}-{hexed[at + 4 : at + 16]}")
        seq += 1
    return ids


_MS_MASK = (1 << 48) - 1
_VARIANT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}
"""A random hex digit as the first digit of the variant group: its top bits set to 10."""


def _prefix(ms: int) -> str:
    """The id's first 15 characters: the 48-bit millisecond time and the version digit 7."""
    h = f"{ms & _MS_MASK:012x}"
    return f"{h[:8]}-{h[8:]}-7"


def _tail(hexed: str, at: int) -> str:
    """The id's last 17 characters from 16 random hex digits of `hexed` at `at`: the variant
    group (its first digit's top bits set to the RFC 9562 variant, 10) and the node group."""
    return f"{_VARIANT[hexed[at]]}{hexed[at + 1 : at + 4]}-{hexed[at + 4 : at + 16]}"
