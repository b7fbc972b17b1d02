"""The produce request and its *produced* answer of the binary batch format. Pure, no I/O.

A produce carries one section per partition, each a message area
(:mod:`.messages`) the broker validates and stores as is; the answer gives each
section's entry position, from which the message ids follow.

**produce** (client → broker, ``POST .../messages``)::

    u8   flags            bit 0: txn id follows, bit 1: producer follows
    [u64 txn_most, u64 txn_least]                        if flags & 1
    [u16 name_len, name utf-8, u64 epoch, u64 sequence]  if flags & 2
    u32  n_sections
    n_sections × (u32 partition, u32 count, u32 body_len, body: count messages)

One section per partition (the client routes); each becomes one entry. Request
indexes run 0, 1, 2, ... over the sections in order, so a section's messages
are numbered ``base .. base+count-1`` (``base``: messages in earlier sections).

**produced** (the broker's answer)::

    u32  n_sections, then n × (u64 ledger_id, u64 entry_id, u32 count)

in request order; a section's message ids are ``ledger:entry`` when
``count`` is 1, else ``ledger:entry:i`` for ``i`` in ``0..count-1``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from streamtx.contracts.txnid import TxnId, from_pair
from streamtx.errors import MalformedError
from streamtx.wire.frame import HAS_TXN, PRODUCE, PRODUCED, TXN, U8, U16, U32, check_prelude, prelude_of
from streamtx.wire.messages import Msg, encode_keyed, encode_messages

_epoch_seq = struct.Struct(">QQ")
_section = struct.Struct(">III")
_produced = struct.Struct(">QQI")

_has_producer = 2


@dataclass(frozen=True, slots=True)
class Section:
    """One partition's share of a produce: its messages' bytes as they will be stored."""

    partition: int
    count: int
    body: bytes
    first_index: int = 0


@dataclass(frozen=True, slots=True)
class Produce:
    """A produce request: sections, optionally a txn and a producer identity."""

    sections: list[Section]
    txn: TxnId | None = None
    producer: tuple[str, int, int] | None = None  # name, epoch, sequence


def encode_produce(sections: Sequence[tuple[int, Sequence[Msg]]], *, txn: TxnId | None = None,
                   producer: tuple[str, int, int] | None = None) -> bytes:
    """A produce body from ``(partition, messages)`` pairs, request indexes in that order."""
    bodies: list[tuple[int, int, bytes]] = []
    index = 0
    for partition, messages in sections:
        count, body = encode_messages(messages, index)
        index += count
        bodies.append((partition, count, body))
    return encode_produce_bodies(bodies, txn=txn, producer=producer)


def encode_produce_keyed(sections: Sequence[tuple[int, Sequence[bytes], Sequence[bytes]]],
                         properties: Mapping[str, str], *, txn: TxnId | None = None) -> bytes:
    """A produce body from ``(partition, values, utf-8 keys)`` sections whose messages all
    carry ``properties``: no message object per record (a worker's outputs)."""
    bodies: list[tuple[int, int, bytes]] = []
    index = 0
    for partition, values, keys in sections:
        bodies.append((partition, len(values), encode_keyed(values, keys, properties, index)))
        index += len(values)
    return encode_produce_bodies(bodies, txn=txn)


def encode_produce_bodies(sections: Iterable[tuple[int, int, bytes]], *, txn: TxnId | None = None,
                          producer: tuple[str, int, int] | None = None) -> bytes:
    """The frame around ``(partition, count, message area)`` sections already encoded, their
    request indexes numbered in this order."""
    flags = (HAS_TXN if txn is not None else 0) | (_has_producer if producer is not None else 0)
    parts = [prelude_of(PRODUCE), U8.pack(flags)]
    if txn is not None:
        parts.append(TXN.pack(*txn))
    if producer is not None:
        name = producer[0].encode()
        parts += [U16.pack(len(name)), name, _epoch_seq.pack(producer[1], producer[2])]
    sections = list(sections)
    parts.append(U32.pack(len(sections)))
    for partition, count, body in sections:
        parts += [_section.pack(partition, count, len(body)), body]
    return b"".join(parts)


def encode_produce_routed(routed: Sequence[tuple[int, Msg]], *, txn: TxnId | None = None,
                          producer: tuple[str, int, int] | None = None) -> tuple[bytes, list[int]]:
    """A produce body from ``(partition, message)`` pairs in request order: one section per
    partition (in order of first appearance). Also the request positions in section order,
    for :func:`ids_in_request_order`."""
    by_partition: dict[int, list[int]] = {}
    for i, (partition, _) in enumerate(routed):
        by_partition.setdefault(partition, []).append(i)
    body = encode_produce([(p, [routed[i][1] for i in indexes]) for p, indexes in by_partition.items()],
                          txn=txn, producer=producer)
    return body, [i for indexes in by_partition.values() for i in indexes]


def ids_in_request_order(order: Sequence[int], produced: bytes) -> list[str]:
    """The ids of a *produced* answer put back in request order (``order`` from
    :func:`encode_produce_routed`)."""
    ids = [""] * len(order)
    for i, message_id in zip(order, decode_produced(produced), strict=True):
        ids[i] = message_id
    return ids


def decode_produce(data: bytes, *, max_sections: int = 1 << 16) -> Produce:
    """The request's frame; section bodies are sliced out, not walked (see :func:`validate_messages`)."""
    view = memoryview(data)
    off = check_prelude(view, PRODUCE)
    try:
        (flags,) = U8.unpack_from(view, off)
        off += 1
        if flags & ~(HAS_TXN | _has_producer):
            raise MalformedError(f"unknown produce flags {flags:#x}")
        txn: TxnId | None = None
        producer = None
        if flags & HAS_TXN:
            txn = from_pair(TXN.unpack_from(view, off))
            off += TXN.size
        if flags & _has_producer:
            (n,) = U16.unpack_from(view, off)
            if n == 0 or off + 2 + n > len(view):
                raise MalformedError("producer: bad name length")
            name = str(view[off + 2:off + 2 + n], "utf-8")
            off += 2 + n
            epoch, seq = _epoch_seq.unpack_from(view, off)
            off += _epoch_seq.size
            producer = (name, epoch, seq)
        (n_sections,) = U32.unpack_from(view, off)
        off += 4
        if n_sections > max_sections:
            raise MalformedError(f"{n_sections} sections; at most {max_sections}")
        sections = []
        index = 0
        for _ in range(n_sections):
            partition, count, size = _section.unpack_from(view, off)
            off += _section.size
            if off + size > len(view):
                raise MalformedError("a section runs past the body")
            sections.append(Section(partition, count, bytes(view[off:off + size]), index))
            off += size
            index += count
    except struct.error:
        raise MalformedError("produce batch ends early") from None
    except UnicodeDecodeError:
        raise MalformedError("producer: name is not UTF-8") from None
    if off != len(view):
        raise MalformedError(f"{len(view) - off} bytes after the last section")
    return Produce(sections, txn, producer)


def encode_produced(sections: Iterable[tuple[int, int, int]]) -> bytes:
    """The answer: ``(ledger_id, entry_id, count)`` per section, in request order."""
    rows = list(sections)
    return b"".join([prelude_of(PRODUCED), U32.pack(len(rows)), *(_produced.pack(*r) for r in rows)])


def decode_produced_rows(data: bytes) -> list[tuple[int, int, int]]:
    """The ``(ledger_id, entry_id, count)`` rows of a *produced* answer, in request order."""
    off = check_prelude(data, PRODUCED)
    try:
        (n,) = U32.unpack_from(data, off)
        off += 4
        return [_produced.unpack_from(data, off + k * _produced.size) for k in range(n)]
    except struct.error:
        raise MalformedError("produced answer ends early") from None


def decode_produced(data: bytes) -> list[str]:
    """The message ids of a *produced* answer, in request order."""
    off = check_prelude(data, PRODUCED)
    try:
        (n,) = U32.unpack_from(data, off)
        off += 4
        ids: list[str] = []
        for _ in range(n):
            lid, eid, count = _produced.unpack_from(data, off)
            off += _produced.size
            ids += message_ids(lid, eid, range(count), count)
    except struct.error:
        raise MalformedError("produced answer ends early") from None
    return ids


def message_ids(ledger_id: int, entry_id: int, indexes: Iterable[int], count: int) -> list[str]:
    """The ids of an entry's messages: :func:`streamtx.contracts.msgid.format_id`'s layout, the
    ``ledger:entry`` part formatted once per entry (a batch has thousands; tests hold them equal)."""
    base = f"{ledger_id}:{entry_id}"
    if count == 1:
        return [base]
    return [f"{base}:{i}" for i in indexes]
