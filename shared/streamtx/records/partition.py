"""The partition entry codec: what one entry of a partition ledger holds. Pure, no I/O.

Every entry starts with a fixed header; integers are big-endian::

    u8   version          (1)
    u8   kind             1 message batch, 2 commit marker, 3 abort marker, 4 producer epoch,
                          5 replication marker (PIP-33)
    u8   flags            bit 0: a txn id follows, bit 1: a producer follows,
                          bit 2: a replication source follows
    i64  publish_time_ms
    [u64 txn_most, u64 txn_least]                        if flags & 1
    [u16 name_len, name utf-8, u64 epoch, u64 sequence]  if flags & 2
    [u16 cluster_len, cluster utf-8, u64 ledger_id, u64 entry_id, i64 publish_time_ms]  if flags & 4
    u32  count            messages in the batch (0 for markers and producer entries)

A replicated entry (written by the replication controller) names its source
cluster, its position there and its publish time there (the header's publish
time is when it was appended here); the replicator never sends such an entry on,
so replication cannot loop. A replication marker's body, after the header, is
one JSON object (:mod:`streamtx.broker.replication.markers`); ``count`` is 0.

then, for a message batch, ``count`` messages, each::

    u32  request_index    the message's place in the produce request (dedup answers)
    i32  key_len          -1 when there is no key
    key utf-8
    u16  n_properties, then n × (u16 len, utf-8 name, u32 len, utf-8 value)
    u32  value_len, value bytes

The message area after the header is also the layout of a section of the binary
wire format (:mod:`streamtx.wire.messages`): a section the broker validated is stored
behind its header as is (:func:`encode_raw_batch`), and a fetch hands it out as is.

A batch of one message has the message id ``ledger:entry``; a batch of more has
``ledger:entry:batch_index`` per message. :func:`decode_header` reads only the
header, so recovery can replay a partition without decoding payloads.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from streamtx.contracts.msgid import format_id
from streamtx.contracts.txnid import TxnId, from_pair
from streamtx.errors import CorruptEntryError
from streamtx.wire import messages as wire_messages

version = 1

_head = struct.Struct(">BBBq")
_txn = struct.Struct(">QQ")
_u16 = struct.Struct(">H")
_u32 = struct.Struct(">I")
_epoch_seq = struct.Struct(">QQ")
_source_pos = struct.Struct(">QQq")
_has_txn, _has_producer, _has_source = 1, 2, 4



class EntryKind(enum.IntEnum):
    BATCH = 1
    COMMIT = 2
    ABORT = 3
    PRODUCER = 4
    MARKER = 5


@dataclass(frozen=True, slots=True)
class ProducerInfo:
    """Who produced an entry: dedup by sequence, fencing by epoch."""

    name: str
    epoch: int
    sequence: int


@dataclass(frozen=True, slots=True)
class SourceInfo:
    """Where a replicated entry was first written: its cluster and position there."""

    cluster: str
    ledger_id: int
    entry_id: int
    publish_time_ms: int = 0


@dataclass(frozen=True, slots=True)
class Message:
    """One message as stored (value is raw bytes; JSON routes base64 it)."""

    value: bytes
    key: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    request_index: int = 0


@dataclass(frozen=True, slots=True)
class EntryHeader:
    kind: EntryKind
    publish_time_ms: int
    txn: TxnId | None
    producer: ProducerInfo | None
    count: int
    body_offset: int
    source: SourceInfo | None = None


def _encode_head(
    kind: EntryKind, publish_time_ms: int, txn: TxnId | None, producer: ProducerInfo | None, count: int,
    source: SourceInfo | None = None,
) -> list[bytes]:
    flags = ((_has_txn if txn is not None else 0) | (_has_producer if producer is not None else 0)
             | (_has_source if source is not None else 0))
    parts = [_head.pack(version, kind, flags, publish_time_ms)]
    if txn is not None:
        parts.append(_txn.pack(*txn))
    if producer is not None:
        name = producer.name.encode()
        parts += [_u16.pack(len(name)), name, _epoch_seq.pack(producer.epoch, producer.sequence)]
    if source is not None:
        cluster = source.cluster.encode()
        parts += [_u16.pack(len(cluster)), cluster, _source_pos.pack(source.ledger_id, source.entry_id,
                                                                     source.publish_time_ms)]
    parts.append(_u32.pack(count))
    return parts


def encode_batch(
    messages: Iterable[Message],
    *,
    publish_time_ms: int,
    txn: TxnId | None = None,
    producer: ProducerInfo | None = None,
    source: SourceInfo | None = None,
) -> bytes:
    msgs = list(messages)
    parts = _encode_head(EntryKind.BATCH, publish_time_ms, txn, producer, len(msgs), source)
    parts.append(wire_messages.encode_fields((m.value, m.key, m.properties, m.request_index) for m in msgs))
    return b"".join(parts)


def encode_raw_batch(
    body: bytes, count: int, *, publish_time_ms: int, txn: TxnId | None = None,
    producer: ProducerInfo | None = None,
) -> bytes:
    """A batch entry around ``count`` messages already in the stored layout (validated by the caller)."""
    return b"".join([*_encode_head(EntryKind.BATCH, publish_time_ms, txn, producer, count), body])


def encode_marker(kind: EntryKind, txn: TxnId, *, publish_time_ms: int) -> bytes:
    if kind not in (EntryKind.COMMIT, EntryKind.ABORT):
        raise ValueError(f"not a marker kind: {kind!r}")
    return b"".join(_encode_head(kind, publish_time_ms, txn, None, 0))


def encode_replication_marker(body: bytes, *, publish_time_ms: int, producer: ProducerInfo | None = None,
                              source: SourceInfo | None = None) -> bytes:
    """A replication marker entry: the header, then ``body`` (one JSON object)."""
    return b"".join([*_encode_head(EntryKind.MARKER, publish_time_ms, None, producer, 0, source), body])


def marker_body(data: bytes, header: EntryHeader) -> bytes:
    """The JSON body of a replication marker entry."""
    return bytes(data[header.body_offset:])


def encode_producer(producer: ProducerInfo, *, publish_time_ms: int) -> bytes:
    return b"".join(_encode_head(EntryKind.PRODUCER, publish_time_ms, None, producer, 0))


def decode_header(data: bytes) -> EntryHeader:
    try:
        ver, kind, flags, publish = _head.unpack_from(data, 0)
        if ver != version:
            raise CorruptEntryError(f"unknown entry version {ver}")
        off = _head.size
        txn: TxnId | None = None
        producer: ProducerInfo | None = None
        if flags & _has_txn:
            txn = from_pair(_txn.unpack_from(data, off))
            off += _txn.size
        if flags & _has_producer:
            (n,) = _u16.unpack_from(data, off)
            name = data[off + 2 : off + 2 + n].decode()
            off += 2 + n
            epoch, seq = _epoch_seq.unpack_from(data, off)
            off += _epoch_seq.size
            producer = ProducerInfo(name, epoch, seq)
        source: SourceInfo | None = None
        if flags & _has_source:
            (n,) = _u16.unpack_from(data, off)
            cluster = data[off + 2 : off + 2 + n].decode()
            off += 2 + n
            lid, eid, spub = _source_pos.unpack_from(data, off)
            off += _source_pos.size
            source = SourceInfo(cluster, lid, eid, spub)
        (count,) = _u32.unpack_from(data, off)
        return EntryHeader(EntryKind(kind), publish, txn, producer, count, off + 4, source)
    except (struct.error, ValueError, UnicodeDecodeError) as exc:
        raise CorruptEntryError(f"bad entry header: {exc}") from exc


Fields = wire_messages.Fields


def decode_fields(data: bytes, header: EntryHeader | None = None) -> list[Fields]:
    """The batch's messages as ``(value, key, properties, request_index)`` tuples (the fetch
    path's decoder: the wire format's, :func:`streamtx.wire.messages.decode_fields`)."""
    h = header or decode_header(data)
    return wire_messages.decode_fields(data, h.count, h.body_offset, error=CorruptEntryError)


def decode_messages(data: bytes, header: EntryHeader | None = None) -> list[Message]:
    return [Message(v, k, p, r) for v, k, p, r in decode_fields(data, header)]


def message_id(ledger_id: int, entry_id: int, batch_index: int, batch_size: int) -> str:
    """The id of message ``batch_index`` of an entry of ``batch_size`` (a lone message: no index)."""
    return format_id(ledger_id, entry_id, batch_index if batch_size > 1 else None)
