"""The file backend's on-disk codec: segment entries, segment and directory names.

A segment file holds entries back to back, with no file header. One entry
(big-endian)::

    offset  size  field
    0       4     length   n, the payload's length: 1 <= n <= max_entry_bytes
    4       4     crc      CRC32C (Castagnoli) of the payload
    8       n     payload  one frame (see :mod:`.frames`)

An empty payload is not a valid entry, so a run of zero bytes (what a file
system may show after a crash that extended a file without writing its data)
never decodes as entries.

Segment files are named ``{base_offset:020d}.seg``: the offset of the first
entry in the segment, zero-padded so names sort like offsets. The ledger
offset of an entry is its segment's base offset plus its index in the segment.

The trim state file (``TRIM``) holds what the last trim persisted::

    offset  size  field
    0       8     start    the logical first offset
    8       4     n        length of the fence state
    12      n     state    FenceState.encode() at ``start``
    12+n    4     crc      CRC32C of bytes 0 .. 12+n

Ledger directories are named by :func:`ledger_dir_name`.

This module is pure: no I/O.
"""

from __future__ import annotations

import hashlib
import re
import struct
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum

import google_crc32c

from streamtx.errors import CorruptEntryError

_HEADER = struct.Struct(">II")
HEADER_SIZE = _HEADER.size  # 8 bytes
max_entry_bytes = 1 << 27  # 128 MiB: a larger length field is garbage

SEGMENT_SUFFIX = ".seg"
_SEGMENT_NAME = re.compile(r"^(\d{20})\.seg$")
_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_max_dir_name = 200  # bytes; longer escaped names are cut and given a hash suffix


def crc32c(data: bytes) -> int:
    return int(google_crc32c.value(data))


def encode_entries(payloads: Sequence[bytes]) -> bytes:
    """Entries for ``payloads``, ready to be written with one write."""
    parts: list[bytes] = []
    for payload in payloads:
        if not payload:
            raise ValueError("an entry payload cannot be empty")
        if len(payload) > max_entry_bytes:
            raise ValueError(f"an entry payload of {len(payload)} bytes is too large")
        parts.append(_HEADER.pack(len(payload), crc32c(payload)))
        parts.append(payload)
    return b"".join(parts)


class ScanStop(Enum):
    """Why a scan stopped."""

    END = "end"  # the buffer ends exactly after an entry
    SHORT = "short"  # the buffer ends inside an entry (more bytes may follow in the file)
    CORRUPT = "corrupt"  # an impossible length or a checksum mismatch


@dataclass(slots=True)
class ScanResult:
    """What :func:`scan` found in a buffer."""

    positions: array[int] = field(default_factory=lambda: array("Q"))  # entry starts
    end: int = 0  # position just after the last valid entry
    stop: ScanStop = ScanStop.END
    need: int = 0  # when SHORT: the bytes the incomplete entry needs from ``end``
    reason: str = ""


def scan(buf: bytes, base: int = 0) -> ScanResult:
    """Index the valid entries at the start of ``buf``.

    ``buf`` holds file bytes from position ``base``; positions in the result are
    file positions. The scan stops at the end of the buffer or at the first
    entry that is incomplete or corrupt; what that means (a torn tail, a write
    in progress, or real corruption) is for the caller to decide.
    """
    res = ScanResult(end=base)
    positions = res.positions
    pos, size = 0, len(buf)
    while pos < size:
        if size - pos < HEADER_SIZE:
            res.stop, res.need, res.reason = ScanStop.SHORT, HEADER_SIZE, "short header"
            break
        length, crc = _HEADER.unpack_from(buf, pos)
        if length == 0 or length > max_entry_bytes:
            res.stop, res.reason = ScanStop.CORRUPT, f"impossible entry length {length}"
            break
        stop = pos + HEADER_SIZE + length
        if stop > size:
            res.stop, res.need = ScanStop.SHORT, HEADER_SIZE + length
            res.reason = f"short payload ({size - pos - HEADER_SIZE} of {length} bytes)"
            break
        if crc32c(buf[pos + HEADER_SIZE : stop]) != crc:
            res.stop, res.reason = ScanStop.CORRUPT, "checksum mismatch"
            break
        positions.append(base + pos)
        pos = stop
    res.end = base + pos
    return res


@dataclass(frozen=True, slots=True)
class Resync:
    """What :func:`find_entry` found after a bad entry."""

    found: int | None  # position in the buffer of the first valid entry, if any
    complete: bool  # False: the search gave up (budget spent) before the buffer's end


_nonzero = re.compile(rb"[^\x00]")


def find_entry(
    buf: bytes,
    start: int,
    *,
    plausible: Callable[[bytes, int, int], bool] | None = None,
    crc_budget: int = 1 << 30,
) -> Resync:
    """The first position at or after ``start`` where a whole, checksummed entry begins.

    What tells a torn tail (nothing valid after the bad bytes) from corruption
    (valid entries after them). Every byte position is a candidate; a cheap
    filter keeps the checksums few: the length must fit the rest of the buffer
    (so it starts with zero bytes, found with ``bytes.find``), a run of zeros is
    skipped (a length is never 0), and ``plausible(buf, payload_start, length)``
    may reject a candidate before its checksum. At most ``crc_budget`` bytes are
    checksummed; past that the answer is "not complete" and the caller should
    assume the worst.
    """
    size, i, spent = len(buf), start, 0
    while True:
        rest = size - i - HEADER_SIZE
        if rest < 1:
            return Resync(None, True)
        # A length that fits ``rest`` has this many leading zero bytes at least.
        zeros = 4 - (rest.bit_length() + 7) // 8
        if zeros > 0:
            i = buf.find(bytes(zeros), i)
            if i < 0 or size - i - HEADER_SIZE < 1:
                return Resync(None, True)
        length, crc = _HEADER.unpack_from(buf, i)
        if length == 0:
            m = _nonzero.search(buf, i)
            if m is None:
                return Resync(None, True)
            i = max(i + 1, m.start() - 3)
            continue
        stop = i + HEADER_SIZE + length
        if length <= max_entry_bytes and stop <= size and (
            plausible is None or plausible(buf, i + HEADER_SIZE, length)
        ):
            spent += length
            if spent > crc_budget:
                return Resync(None, False)
            if crc32c(buf[i + HEADER_SIZE : stop]) == crc:
                return Resync(i, True)
        i += 1


def decode_run(buf: bytes, count: int) -> list[bytes]:
    """The payloads of ``count`` consecutive entries at the start of ``buf``, checked."""
    out: list[bytes] = []
    pos = 0
    for _ in range(count):
        if len(buf) - pos < HEADER_SIZE:
            raise CorruptEntryError("entry header cut short")
        length, crc = _HEADER.unpack_from(buf, pos)
        payload = buf[pos + HEADER_SIZE : pos + HEADER_SIZE + length]
        if length == 0 or len(payload) != length or crc32c(payload) != crc:
            raise CorruptEntryError("entry failed its checksum on read")
        out.append(payload)
        pos += HEADER_SIZE + length
    return out


_TRIM_HEAD = struct.Struct(">QI")
_CRC = struct.Struct(">I")


def encode_trim_state(start: int, state: bytes) -> bytes:
    body = _TRIM_HEAD.pack(start, len(state)) + state
    return body + _CRC.pack(crc32c(body))


def decode_trim_state(raw: bytes) -> tuple[int, bytes]:
    """``(start, fence state bytes)`` from a trim state file's bytes."""
    if len(raw) < _TRIM_HEAD.size + _CRC.size:
        raise CorruptEntryError(f"trim state of {len(raw)} bytes is too short")
    start, n = _TRIM_HEAD.unpack_from(raw)
    body_end = _TRIM_HEAD.size + n
    if len(raw) != body_end + _CRC.size or crc32c(raw[:body_end]) != _CRC.unpack_from(
        raw, body_end
    )[0]:
        raise CorruptEntryError("trim state failed its checksum")
    return start, raw[_TRIM_HEAD.size : body_end]


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}{SEGMENT_SUFFIX}"


def parse_segment_name(name: str) -> int | None:
    """The base offset a segment file name holds, or None for any other file."""
    m = _SEGMENT_NAME.match(name)
    return int(m.group(1)) if m else None


def ledger_dir_name(name: str) -> str:
    """A safe directory name for a ledger name.

    Bytes of the UTF-8 name outside ``[A-Za-z0-9_-]`` become ``%XX`` (uppercase
    hex), so the result has no ``/``, no leading dot and is reversible with
    :func:`ledger_name_of`. Names that escape to more than 200 bytes are cut to
    183 and get ``~`` plus 16 hex digits of the full name's SHA-256 (not
    reversible, still unique).
    """
    raw = name.encode()
    escaped = "".join(chr(b) if b in _SAFE else f"%{b:02X}" for b in raw) or "%"
    if len(escaped) <= _max_dir_name:
        return escaped
    cut = escaped[:183]
    cut = cut[: cut.rfind("%")] if "%" in cut[-2:] else cut  # do not split an escape
    return f"{cut}~{hashlib.sha256(raw).hexdigest()[:16]}"


def ledger_name_of(dir_name: str) -> str | None:
    """The ledger name behind a directory name, or None when it was hashed."""
    if "~" in dir_name:
        return None
    if dir_name == "%":
        return ""
    out = bytearray()
    i = 0
    while i < len(dir_name):
        if dir_name[i] == "%":
            out.append(int(dir_name[i + 1 : i + 3], 16))
            i += 3
        else:
            out.append(ord(dir_name[i]))
            i += 1
    return out.decode()
