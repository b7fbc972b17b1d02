"""Pending-ack log records and their byte codec.

One pending-ack log per subscription holds these records; the buffered writer
may pack several into one batched entry (see :mod:`streamtx.batching`), whose
first bytes are the magic ``0x0e01``. An unbatched entry is exactly one record,
so a record must never begin with ``0x0e``: every record starts with its kind,
a byte in ``0x01..0x04``.

Layout (big-endian, field by field)::

    kind        u8     1 PENDING_ACK, 2 PREPARED, 3 COMMITTED, 4 ABORTED
    txn_most    u64
    txn_least   u64
    -- PENDING_ACK only --
    flags       u8     bit 0: cumulative
    count       u32    number of acked message ids
    count x:
      ledger_id    u64
      entry_id     u64
      batch_index  i32   -1 when the id names a whole entry

PREPARED is written when the optimistic check passed, so that a restart
between prepare and end keeps the transaction's positions reserved.

This module is pure: no I/O.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from streamtx.contracts.msgid import MessageId as MessageId  # the one contract, re-exported
from streamtx.contracts.txnid import TxnId
from streamtx.errors import CorruptEntryError

_header = struct.Struct(">BQQ")
_ack_header = struct.Struct(">BI")
_msg = struct.Struct(">QQi")
_flag_cumulative = 0x01


class RecordKind(enum.IntEnum):
    """The first byte of every record (never 0x0e, the batched-entry magic)."""

    PENDING_ACK = 1
    PREPARED = 2
    COMMITTED = 3
    ABORTED = 4


@dataclass(frozen=True, slots=True)
class PendingAck:
    """A transaction acked these messages (cumulatively: everything up to the one id)."""

    txn: TxnId
    message_ids: tuple[MessageId, ...]
    cumulative: bool = False

    kind = RecordKind.PENDING_ACK


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """PREPARED, COMMITTED or ABORTED for one transaction."""

    kind: RecordKind
    txn: TxnId


Record = PendingAck | TxnMarker


def encode(record: Record) -> bytes:
    """The bytes of one record (first byte is its kind, never 0x0e)."""
    head = _header.pack(record.kind, record.txn.most, record.txn.least)
    if isinstance(record, TxnMarker):
        if record.kind is RecordKind.PENDING_ACK:
            raise ValueError("a marker cannot have kind PENDING_ACK")
        return head
    flags = _flag_cumulative if record.cumulative else 0
    body = b"".join(_msg.pack(*m) for m in record.message_ids)
    return head + _ack_header.pack(flags, len(record.message_ids)) + body


def decode(data: bytes) -> Record:
    """The record in ``data``; CorruptEntryError when it is not one."""
    try:
        kind_byte, most, least = _header.unpack_from(data, 0)
        kind = RecordKind(kind_byte)
    except (struct.error, ValueError) as exc:
        raise CorruptEntryError(f"pending-ack record: bad header ({exc})") from exc
    txn = TxnId(most, least)
    if kind is not RecordKind.PENDING_ACK:
        if len(data) != _header.size:
            raise CorruptEntryError(f"pending-ack {kind.name} record has {len(data)} bytes")
        return TxnMarker(kind, txn)
    try:
        flags, count = _ack_header.unpack_from(data, _header.size)
    except struct.error as exc:
        raise CorruptEntryError("pending-ack record: truncated ack header") from exc
    start = _header.size + _ack_header.size
    if len(data) != start + count * _msg.size:
        raise CorruptEntryError(f"pending-ack record: {len(data)} bytes for {count} message ids")
    ids = tuple(MessageId(*t) for t in _msg.iter_unpack(data[start:]))
    return PendingAck(txn, ids, bool(flags & _flag_cumulative))
