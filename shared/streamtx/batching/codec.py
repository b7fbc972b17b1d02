"""The batched-entry format of PIP-160: several log records in one ledger entry.

Layout of a batched entry (big-endian)::

    offset  size  field
    0       2     magic      0x0e01
    2       2     version    1
    4       4     length_0   u32, bytes of record 0
    8       n_0   record_0
    ...           (length_i, record_i) for each further record, in write order

An entry that does not begin with the two magic bytes is ONE unbatched record,
stored as is (no header). A log holds both kinds after batching is switched on
or off, and :func:`decode_entry` reads both.

Record codecs must therefore guarantee that an encoded record never begins
with the magic bytes ``0x0e 0x01`` (a leading type or version byte other than
``0x0e`` is enough); otherwise an unbatched record would be read back as a
batch. :class:`~streamtx.batching.writer.BufferedWriter` never writes such an
entry: it wraps a record that starts with the magic in a one-record batch.

This module is pure: no I/O, no asyncio.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from streamtx.errors import CorruptEntryError

__all__ = [
    "HEADER_SIZE",
    "MAGIC",
    "RECORD_OVERHEAD",
    "VERSION",
    "batched_size",
    "decode_entry",
    "encode_batch",
    "is_batched",
]

MAGIC = b"\x0e\x01"
VERSION = 1
_HEADER = struct.Struct(">2sH")
_LENGTH = struct.Struct(">I")
HEADER_SIZE = _HEADER.size  # 4 bytes: magic + version
RECORD_OVERHEAD = _LENGTH.size  # 4 bytes of length before each record
_HEADER_BYTES = _HEADER.pack(MAGIC, VERSION)
_pack_length = _LENGTH.pack
_unpack_length = _LENGTH.unpack_from


def is_batched(data: bytes) -> bool:
    """True when ``data`` is a batched entry (it begins with the magic bytes)."""
    return data[:2] == MAGIC


def batched_size(records: Sequence[bytes]) -> int:
    """The size in bytes of the batched entry :func:`encode_batch` makes of ``records``."""
    return HEADER_SIZE + RECORD_OVERHEAD * len(records) + sum(map(len, records))


def encode_batch(records: Sequence[bytes]) -> bytes:
    """One batched entry holding ``records`` in order."""
    parts = [_HEADER_BYTES] * (2 * len(records) + 1)
    parts[2::2] = records
    parts[1::2] = [_pack_length(len(r)) for r in records]
    return b"".join(parts)


def decode_entry(data: bytes) -> list[bytes]:
    """The records of an entry: all of a batched one, or the entry itself if unbatched.

    Raises :class:`CorruptEntryError` for a batched entry that is truncated (its
    header, a record's length or a record's bytes cut off) or names a version
    this code does not know.
    """
    if data[:2] != MAGIC:
        return [data]
    size = len(data)
    if size < HEADER_SIZE:
        raise CorruptEntryError(f"batched entry of {size} bytes is shorter than its header")
    _, version = _HEADER.unpack_from(data)
    if version != VERSION:
        raise CorruptEntryError(f"batched entry version {version} is not supported (only {VERSION})")
    data = bytes(data)  # the same object when it is bytes already; slices are then bytes
    out: list[bytes] = []
    offset = HEADER_SIZE
    while offset < size:
        start = offset + RECORD_OVERHEAD
        if start > size:
            raise CorruptEntryError(
                f"batched entry truncated: record {len(out)} length at byte {offset} of {size}"
            )
        (length,) = _unpack_length(data, offset)
        end = start + length
        if end > size:
            raise CorruptEntryError(
                f"batched entry truncated: record {len(out)} needs {length} bytes "
                f"at byte {start}, only {size - start} left"
            )
        out.append(data[start:end])
        offset = end
    return out
