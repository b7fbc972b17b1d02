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

from streamtx.contracts.txnid import TxnId, from_pair
from streamtx.errors import MalformedError
from streamtx.wire.frame import ACKS, HAS_TXN, TXN, U8, U32, check_prelude, prelude_of

_ack = struct.Struct(">QQi")

_cumulative = 2


@dataclass(frozen=True, slots=True)
class Acks:
    """An ack request: ``(ledger_id, entry_id, batch_index or None)`` per message."""

    ids: list[tuple[int, int, int | None]]
    txn: TxnId | None = None
    cumulative: bool = False

    def id_strings(self) -> list[str]:
        return [f"{lid}:{eid}" if bi is None else f"{lid}:{eid}:{bi}" for lid, eid, bi in self.ids]


def parse_id(message_id: str) -> tuple[int, int, int | None]:
    """``ledger:entry[:batch]`` to its numbers; ValueError when malformed."""
    lid, _, rest = message_id.partition(":")
    eid, sep, bi = rest.partition(":")
    return int(lid), int(eid), (int(bi) if sep else None)


def encode_acks(ids: Iterable[str], *, txn: TxnId | None = None, cumulative: bool = False) -> bytes:
    rows = [parse_id(m) for m in ids]
    flags = (HAS_TXN if txn is not None else 0) | (_cumulative if cumulative else 0)
    parts = [prelude_of(ACKS), U8.pack(flags)]
    if txn is not None:
        parts.append(TXN.pack(*txn))
    parts.append(U32.pack(len(rows)))
    parts += [_ack.pack(lid, eid, -1 if bi is None else bi) for lid, eid, bi in rows]
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
        ids: list[tuple[int, int, int | None]] = []
        for lid, eid, bi in _ack.iter_unpack(data[off:]):
            if bi < -1:
                raise MalformedError(f"bad batch index {bi}")
            ids.append((lid, eid, None if bi == -1 else bi))
    except struct.error:
        raise MalformedError("ack batch ends early") from None
    return Acks(ids, txn, bool(flags & _cumulative))
