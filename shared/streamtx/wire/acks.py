"""The acks request of the binary batch format: message ids, cumulative or not, maybe in a txn. Pure, no I/O.

**acks** (client → broker, ``POST .../acks``)::

    u8   flags            bit 0: txn id follows, bit 1: cumulative
    [u64 txn_most, u64 txn_least]  if flags & 1
    u32  n, then n × (u64 ledger_id, u64 entry_id, i32 batch_index, -1 for none)
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from streamtx.contracts.msgid import MessageId
from streamtx.contracts.txnid import TxnId, from_pair
from streamtx.errors import MalformedError
from streamtx.wire.frame import ACKS, HAS_TXN, TXN, U8, U32, check_prelude, prelude_of

_ack = struct.Struct(">QQi")

_cumulative = 2
_new = tuple.__new__


@dataclass(frozen=True, slots=True)
class Acks:
    """An ack request: the message ids, typed (never formatted and parsed again on the way)."""

    ids: list[MessageId]
    txn: TxnId | None = None
    cumulative: bool = False

    def id_strings(self) -> list[str]:
        return [str(m) for m in self.ids]


def encode_acks(ids: Iterable[str | MessageId], *, txn: TxnId | None = None,
                cumulative: bool = False) -> bytes:
    """The acks body; a text id is parsed by :meth:`MessageId.parse` (400 ``malformed`` when bad)."""
    rows = [m if isinstance(m, MessageId) else MessageId.parse(m) for m in ids]
    flags = (HAS_TXN if txn is not None else 0) | (_cumulative if cumulative else 0)
    parts = [prelude_of(ACKS), U8.pack(flags)]
    if txn is not None:
        parts.append(TXN.pack(*txn))
    parts.append(U32.pack(len(rows)))
    parts += [_ack.pack(*m) for m in rows]
    return b"".join(parts)


def decode_acks(data: bytes) -> Acks:
    off = check_prelude(data, ACKS)
    try:
        (flags,) = U8.unpack_from(data, off)
        off += 1
        if flags & ~(HAS_TXN | _cumulative):
            raise MalformedError(f"unknown ack flags {flags:#x}")
        txn: TxnId | None = None
        if flags & HAS_TXN:
            txn = from_pair(TXN.unpack_from(data, off))
            off += TXN.size
        (n,) = U32.unpack_from(data, off)
        off += 4
        if off + n * _ack.size != len(data):
            raise MalformedError(f"{n} ids do not fill the {len(data) - off} bytes after the count")
        ids: list[MessageId] = []
        for row in _ack.iter_unpack(data[off:]):
            if row[2] < -1:
                raise MalformedError(f"bad batch index {row[2]}")
            ids.append(_new(MessageId, row))  # u64, u64, i32 >= -1: in range by their layout
    except struct.error:
        raise MalformedError("ack batch ends early") from None
    return Acks(ids, txn, bool(flags & _cumulative))
