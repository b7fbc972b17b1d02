"""Reading a byte range of one file-ledger segment, without the rest of the file. Pure.

A Spark task gets a split ``[lo, hi)`` of one segment (format in
:mod:`streamtx.ledger.segment`: ``u32 length | u32 CRC32C | frame``, entries
back to back, no file header). The task owns the entries that *start* in its
range; the last one may run past ``hi`` and is read whole.

A split that starts inside the segment (``lo > 0``) does not know where an
entry starts, so it **resynchronises**: the first position ``p >= lo`` where
an entry header is plausible (length within the segment, frame kind 1 or 2)
and the chain of the next few headers is plausible too, and the entry at
``p`` passes its CRC32C. A false match needs a 32-bit checksum collision on
top of several plausible headers in a row; the neighbouring split reads
through the same bytes from a true boundary, so the two agree.

Entry ids are not in the file: the id of an entry is its segment's base plus
its index in the segment. A first pass (:func:`walk_headers`) counts each
split's entries and returns their frame headers (21 bytes each: what the
fence rule needs); the driver adds the counts up in split order, judges the
frames with the ledger layer's own :class:`~streamtx.ledger.frames.FenceTracker`
and sends each split its first entry id and the ids to drop
(:func:`read_entries`, the second pass).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator

import google_crc32c

from streamtx.errors import CorruptEntryError
from streamtx.ledger import frames as framing
from streamtx.ledger import segment

_entry_head = struct.Struct(">II")
_frame_head = struct.Struct(">BQIQ")
_both = struct.Struct(">IIBQIQ")  # entry header + frame header, 29 bytes
_both_size = _both.size
_chain = 4  # headers after a resync candidate that must be plausible too
_chunk_bytes = 8 << 20
FrameHeader = tuple[int, int, int, int]  # kind, writer_id, epoch, seq


def _plausible(buf: bytes, pos: int, seg_size: int, base: int) -> int:
    """The end of a plausible entry header at ``pos`` (-1 if none); ``base`` = file offset of buf[0]."""
    if pos + _both_size > len(buf):
        return -1
    length: int
    length, _, kind, _, _, _ = _both.unpack_from(buf, pos)
    end: int = pos + segment.HEADER_SIZE + length
    if length < framing.HEADER_SIZE or kind not in (1, 2) or base + end > seg_size:
        return -1
    return end


def resync(fd: int, lo: int, seg_size: int) -> int:
    """The file position of the first entry starting at or after ``lo`` (``seg_size`` if none)."""
    if lo == 0:
        return 0
    pos = lo
    while pos < seg_size:
        want = min(seg_size - pos, _chunk_bytes + 64 * 1024)
        buf = os.pread(fd, want, pos)
        for i in range(max(len(buf) - _both_size, 0) + 1):
            if _is_boundary(fd, buf, i, pos, seg_size):
                return pos + i
        pos += max(len(buf) - _both_size, 1)
    return seg_size


def _is_boundary(fd: int, buf: bytes, i: int, base: int, seg_size: int) -> bool:
    end = _plausible(buf, i, seg_size, base)
    if end < 0:
        return False
    nxt = end
    for _ in range(_chain):  # cheap checks first: the headers that follow
        if base + nxt >= seg_size:
            break
        if nxt + _both_size > len(buf):
            more = os.pread(fd, _both_size, base + nxt)
            if len(more) < _both_size:
                return False
            length, _, kind, _, _, _ = _both.unpack(more)
            if length < framing.HEADER_SIZE or kind not in (1, 2):
                return False
            nxt += segment.HEADER_SIZE + length
            if base + nxt > seg_size:
                return False
            continue
        nxt2 = _plausible(buf, nxt, seg_size, base)
        if nxt2 < 0:
            return False
        nxt = nxt2
    length, crc = _entry_head.unpack_from(buf, i)
    payload = os.pread(fd, length, base + i + segment.HEADER_SIZE)
    return len(payload) == length and bool(google_crc32c.value(payload) == crc)


def _entries(fd: int, start: int, hi: int, seg_size: int, *, payloads: bool) -> Iterator[tuple[int, bytes]]:
    """``(file position, entry bytes from its frame header on)`` of entries starting in [start, hi)."""
    pos = start
    while pos < hi and pos < seg_size:
        want = min(seg_size - pos, max(_chunk_bytes, _both_size))
        buf = os.pread(fd, want, pos)
        i = 0
        while pos + i < hi:
            if i + segment.HEADER_SIZE > len(buf):
                break
            length, crc = _entry_head.unpack_from(buf, i)
            end = i + segment.HEADER_SIZE + length
            if length == 0 or pos + end > seg_size:
                return  # a torn or in-progress tail (zeros, or an entry the file does not hold yet)
            if length < framing.HEADER_SIZE:
                raise CorruptEntryError(f"impossible entry length {length} at byte {pos + i}")
            if end > len(buf):
                if i == 0:  # one entry larger than the chunk
                    buf = os.pread(fd, end, pos)
                    continue
                break
            body = buf[i + segment.HEADER_SIZE : end if payloads else i + _both_size]
            if payloads and google_crc32c.value(body) != crc:
                raise CorruptEntryError(f"entry at byte {pos + i} failed its checksum")
            yield pos + i, body
            i = end
        if i == 0:
            return
        pos += i


def walk_headers(path: str, lo: int, hi: int) -> tuple[int, list[FrameHeader]]:
    """First pass: ``(position of the first entry, frame headers of the entries starting in [lo, hi))``."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:  # the owner trimmed the whole segment since the plan: nothing live
        return hi, []
    try:
        seg_size = os.fstat(fd).st_size
        first = resync(fd, lo, seg_size)
        entries = _entries(fd, first, hi, seg_size, payloads=False)
        heads = [_frame_head.unpack_from(body) for _, body in entries]
        return first, heads
    finally:
        os.close(fd)


def read_entries(
    path: str, first: int, hi: int, first_id: int, drop: frozenset[int]
) -> Iterator[tuple[int, bytes]]:
    """Second pass: ``(entry id, payload)`` of the live entries starting in [first, hi), checksummed."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:  # trimmed away since the first pass (owners trim only what they no longer need)
        return
    try:
        seg_size = os.fstat(fd).st_size
        entry_id = first_id
        for _, frame in _entries(fd, first, hi, seg_size, payloads=True):
            if entry_id not in drop:
                yield entry_id, frame[framing.HEADER_SIZE :]
            entry_id += 1
    finally:
        os.close(fd)
