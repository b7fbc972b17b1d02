"""What every body of the binary batch format starts with, and what its kinds share. Pure, no I/O.

The frame apart from the kinds (:mod:`.messages`, :mod:`.produce`, :mod:`.fetch`,
:mod:`.acks`) so each of those holds one request or answer, its layout
documented beside its encoder and decoder; the overview is :mod:`streamtx.wire.batch`.

Integers are big-endian. Every body starts with::

    4s   magic            b"STXB"
    u8   version          1
    u8   kind             1 produce, 2 produced, 3 messages, 4 acks

The integers and the txn id that several kinds carry are packed with the
structs below; a kind's own fields have their structs in its module.
"""

from __future__ import annotations

import struct

from streamtx.errors import MalformedError

CONTENT_TYPE = "application/x-streamtx-batch"
MAGIC = b"STXB"
VERSION = 1
PRODUCE, PRODUCED, MESSAGES, ACKS = 1, 2, 3, 4

_prelude = struct.Struct(">4sBB")
U8 = struct.Struct(">B")
U16 = struct.Struct(">H")
U32 = struct.Struct(">I")
TXN = struct.Struct(">QQ")  # u64 txn_most, u64 txn_least

HAS_TXN = 1  # flags bit 0 of produce and acks: a txn id follows


def is_batch(content_type: str | None) -> bool:
    """Whether a Content-Type or Accept header names this format."""
    return content_type is not None and CONTENT_TYPE in content_type


def prelude_of(kind: int) -> bytes:
    return _prelude.pack(MAGIC, VERSION, kind)


def check_prelude(data: bytes | memoryview, kind: int) -> int:
    try:
        magic, version, got = _prelude.unpack_from(data, 0)
    except struct.error:
        raise MalformedError("body too short for a batch") from None
    if magic != MAGIC:
        raise MalformedError("not a streamtx batch (bad magic)")
    if version != VERSION:
        raise MalformedError(f"unknown batch version {version}")
    if got != kind:
        raise MalformedError(f"batch of kind {got}, expected {kind}")
    return _prelude.size
