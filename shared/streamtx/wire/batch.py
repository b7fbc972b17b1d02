"""The binary batch wire format, ``application/x-streamtx-batch``: produce, fetch, acks. Pure, no I/O.

JSON stays the default (curl, every existing client); a client opts in with
``Content-Type`` on produce and acks and ``Accept`` on fetch. The point is the
broker's cost: a produced section is validated by a walk over its bytes and
stored as the partition entry's message area *as is* (the broker only puts its
entry header in front: publish time, producer identity, txn id), and a fetch
hands stored entries out as they are. So the message layout below is exactly
the one of the partition entry codec (``streamtx.broker.codec``) after its header.

Integers are big-endian. Every body starts with::

    4s   magic            b"STXB"
    u8   version          1
    u8   kind             1 produce, 2 produced, 3 messages, 4 acks

**A message** (the stored entry layout, ``count`` of them back to back)::

    u32  request_index    the message's place in the produce request
    i32  key_len          -1 when there is no key
    key utf-8
    u16  n_properties, then n × (u16 len, utf-8 name, u32 len, utf-8 value)
    u32  value_len, value bytes

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

**messages** (the broker's answer to a fetch that accepts this type)::

    u32  n_entries
    n_entries × entry:
      u32  partition
      u64  ledger_id, u64 entry_id
      i64  publish_time_ms   (in the source cluster for a replicated entry)
      u8   flags             bit 0: replicated (source follows), bit 1: a selection follows
      [u16 cluster_len, cluster utf-8, u64 src_ledger_id, u64 src_entry_id]   if flags & 1
      u32  count             messages in the stored batch
      [u32 n, n × (u32 batch_index, u32 redelivery_count)]                   if flags & 2
      u32  body_len, body: count messages (as stored)

Without a selection every message of the entry is delivered (none redelivered);
with one, only the listed batch indexes are (the rest were acked or are out
with another consumer). Message ids as for *produced*.

**acks** (client → broker, ``POST .../acks``)::

    u8   flags            bit 0: txn id follows, bit 1: cumulative
    [u64 txn_most, u64 txn_least]  if flags & 1
    u32  n, then n × (u64 ledger_id, u64 entry_id, i32 batch_index, -1 for none)
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple

from streamtx.contracts.txnid import TxnId, from_pair
from streamtx.errors import MalformedError

CONTENT_TYPE = "application/x-streamtx-batch"
MAGIC = b"STXB"
VERSION = 1
PRODUCE, PRODUCED, MESSAGES, ACKS = 1, 2, 3, 4

_prelude = struct.Struct(">4sBB")
_u8 = struct.Struct(">B")
_u16 = struct.Struct(">H")
_u32 = struct.Struct(">I")
_i32 = struct.Struct(">i")
_txn = struct.Struct(">QQ")
_epoch_seq = struct.Struct(">QQ")
_section = struct.Struct(">III")
_produced = struct.Struct(">QQI")
_entry = struct.Struct(">IQQqB")
_src = struct.Struct(">QQ")
_selected = struct.Struct(">II")
_ack = struct.Struct(">QQi")
_msg_head = struct.Struct(">Ii")

_has_txn, _has_producer = 1, 2
_cumulative = 2
_replicated, _selection = 1, 2



def is_batch(content_type: str | None) -> bool:
    """Whether a Content-Type or Accept header names this format."""
    return content_type is not None and CONTENT_TYPE in content_type


# --- messages -----------------------------------------------------------------------


_no_properties: Mapping[str, str] = MappingProxyType({})


class Msg(NamedTuple):
    """One message as the wire carries it (a named tuple: a client builds one per message)."""

    value: bytes
    key: str | None = None
    properties: Mapping[str, str] = _no_properties


def encode_messages(messages: Iterable[Msg], first_index: int = 0) -> tuple[int, bytes]:
    """``(count, body)``: messages in the stored layout, numbered from ``first_index``."""
    fields = [(m.value, m.key, m.properties, i) for i, m in enumerate(messages, first_index)]
    return len(fields), encode_fields(fields)


def encode_fields(messages: Iterable[tuple[bytes, str | None, Mapping[str, str], int]]) -> bytes:
    """``(value, key, properties, request_index)`` tuples in the stored layout: the one encoder
    of the message area (this format's sections and the partition entries,
    :mod:`streamtx.broker.codec`)."""
    parts: list[bytes] = []
    u32, i32, u16 = _u32.pack, _i32.pack, _u16.pack
    # A producer mostly passes one properties object for many messages (its transaction,
    # its name): its block is encoded once per run of the same object.
    last: Mapping[str, str] | None = None
    block = b""
    for value, key, properties, index in messages:
        parts.append(u32(index))
        if key is None:
            parts.append(i32(-1))
        else:
            k = key.encode()
            parts += [i32(len(k)), k]
        if properties is not last:
            props = [u16(len(properties))]
            for name, text in properties.items():
                n, v = name.encode(), text.encode()
                props += [u16(len(n)), n, u32(len(v)), v]
            last, block = properties, b"".join(props)
        parts += [block, u32(len(value)), value]
    return b"".join(parts)


#: One decoded message: ``(value, key, properties, request_index)``.
Fields = tuple[bytes, str | None, dict[str, str], int]


def decode_fields(body: bytes | memoryview, count: int, offset: int = 0, *,
                  error: type[Exception] = MalformedError) -> list[Fields]:
    """``count`` messages of the stored layout from ``offset``: the one decoder of the message
    area (this format's sections and the partition entries, :mod:`streamtx.broker.codec`);
    ``error`` (MalformedError, or the caller's) when the bytes are bad.

    Tuples, not objects: this is the fetch path's decoder, and a frozen dataclass per
    message costs more than the tuple.
    """
    data = bytes(body) if isinstance(body, memoryview) else body
    out: list[Fields] = []
    off, end = offset, len(data)
    u32 = _u32.unpack_from
    try:
        for _ in range(count):
            (req,) = u32(data, off)
            value, key, props, off = message_at(data, off, end)
            out.append((value, key, props, req))
    except (struct.error, UnicodeDecodeError, MalformedError) as exc:
        raise error(f"bad message batch: {exc}") from None
    return out


def decode_messages(body: bytes | memoryview, count: int) -> list[tuple[bytes, str | None, dict[str, str]]]:
    """``count`` messages of ``body`` as ``(value, key, properties)``; MalformedError when bad."""
    return [(v, k, p) for v, k, p, _ in decode_fields(body, count)]


def validate_messages(body: bytes | memoryview, count: int, first_index: int, *,
                      max_name_bytes: int = 1 << 16) -> int:
    """Walk ``count`` messages of ``body`` without building them; their value bytes in total.

    Checks every length against the body's end, the request indexes
    (``first_index`` onwards, in order), that keys and properties are UTF-8
    (names up to ``max_name_bytes``), and that nothing follows the last message.
    A property block equal to the one before (a producer's messages mostly carry
    the same: its transaction, its name) is not walked again.
    """
    raw = body if isinstance(body, bytes) else bytes(body)
    last_block = b""
    data = memoryview(raw)
    end = len(data)
    off = 0
    values = 0
    u32, u16, head = _u32.unpack_from, _u16.unpack_from, _msg_head.unpack_from
    try:
        for i in range(first_index, first_index + count):
            req, klen = head(data, off)
            if req != i:
                raise MalformedError(f"message {i}: request index {req}, expected {i}")
            off += 8
            if klen >= 0:
                if off + klen > end:
                    raise MalformedError(f"message {i}: key runs past the section")
                str(data[off:off + klen], "utf-8")
                off += klen
            elif klen != -1:
                raise MalformedError(f"message {i}: bad key length {klen}")
            if last_block and raw.startswith(last_block, off):
                off += len(last_block)  # the block before, byte for byte: valid as it was
            else:
                start = off
                (nprops,) = u16(data, off)
                off += 2
                for _ in range(nprops):
                    (n,) = u16(data, off)
                    if n > max_name_bytes or off + 2 + n > end:
                        raise MalformedError(f"message {i}: bad property name length {n}")
                    str(data[off + 2:off + 2 + n], "utf-8")
                    off += 2 + n
                    (vl,) = u32(data, off)
                    if off + 4 + vl > end:
                        raise MalformedError(f"message {i}: property value runs past the section")
                    str(data[off + 4:off + 4 + vl], "utf-8")
                    off += 4 + vl
                last_block = raw[start:off]
            (vlen,) = u32(data, off)
            off += 4 + vlen
            if off > end:
                raise MalformedError(f"message {i}: value runs past the section")
            values += vlen
    except struct.error:
        raise MalformedError("section ends inside a message") from None
    except UnicodeDecodeError as exc:
        raise MalformedError(f"a key or property is not UTF-8: {exc.reason}") from None
    if off != end:
        raise MalformedError(f"{end - off} bytes after the last message of a section")
    return values


# --- prelude ---------------------------------------------------------------------------


def _prelude_of(kind: int) -> bytes:
    return _prelude.pack(MAGIC, VERSION, kind)


def _check_prelude(data: bytes | memoryview, kind: int) -> int:
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


# --- produce ---------------------------------------------------------------------------


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
    flags = (_has_txn if txn is not None else 0) | (_has_producer if producer is not None else 0)
    parts = [_prelude_of(PRODUCE), _u8.pack(flags)]
    if txn is not None:
        parts.append(_txn.pack(*txn))
    if producer is not None:
        name = producer[0].encode()
        parts += [_u16.pack(len(name)), name, _epoch_seq.pack(producer[1], producer[2])]
    parts.append(_u32.pack(len(sections)))
    index = 0
    for partition, messages in sections:
        count, body = encode_messages(messages, index)
        index += count
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
    off = _check_prelude(view, PRODUCE)
    try:
        (flags,) = _u8.unpack_from(view, off)
        off += 1
        if flags & ~(_has_txn | _has_producer):
            raise MalformedError(f"unknown produce flags {flags:#x}")
        txn: TxnId | None = None
        producer = None
        if flags & _has_txn:
            txn = from_pair(_txn.unpack_from(view, off))
            off += _txn.size
        if flags & _has_producer:
            (n,) = _u16.unpack_from(view, off)
            if n == 0 or off + 2 + n > len(view):
                raise MalformedError("producer: bad name length")
            name = str(view[off + 2:off + 2 + n], "utf-8")
            off += 2 + n
            epoch, seq = _epoch_seq.unpack_from(view, off)
            off += _epoch_seq.size
            producer = (name, epoch, seq)
        (n_sections,) = _u32.unpack_from(view, off)
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
    return b"".join([_prelude_of(PRODUCED), _u32.pack(len(rows)), *(_produced.pack(*r) for r in rows)])


def decode_produced(data: bytes) -> list[str]:
    """The message ids of a *produced* answer, in request order."""
    off = _check_prelude(data, PRODUCED)
    try:
        (n,) = _u32.unpack_from(data, off)
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
    base = f"{ledger_id}:{entry_id}"
    if count == 1:
        return [base]
    return [f"{base}:{i}" for i in indexes]


# --- fetch -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Delivered:
    """One entry (or part of it) handed to a consumer."""

    partition: int
    ledger_id: int
    entry_id: int
    publish_time_ms: int
    count: int
    body: bytes | memoryview
    selection: Sequence[tuple[int, int]] | None = None  # (batch_index, redelivery_count)
    source: tuple[str, int, int] | None = None  # cluster, ledger_id, entry_id


def encode_messages_answer(entries: Iterable[Delivered]) -> bytes:
    rows = list(entries)
    parts: list[bytes | memoryview] = [_prelude_of(MESSAGES), _u32.pack(len(rows))]
    for e in rows:
        flags = (_replicated if e.source is not None else 0) | (_selection if e.selection is not None else 0)
        parts.append(_entry.pack(e.partition, e.ledger_id, e.entry_id, e.publish_time_ms, flags))
        if e.source is not None:
            cluster = e.source[0].encode()
            parts += [_u16.pack(len(cluster)), cluster, _src.pack(e.source[1], e.source[2])]
        parts.append(_u32.pack(e.count))
        if e.selection is not None:
            parts.append(_u32.pack(len(e.selection)))
            parts += [_selected.pack(bi, rc) for bi, rc in e.selection]
        parts += [_u32.pack(len(e.body)), e.body]
    return b"".join(parts)


class Received(NamedTuple):
    """A message decoded from a *messages* answer.

    A named tuple, not a dataclass: a fetch of 10,000 messages builds 10,000 of
    them, and a frozen dataclass's ``__init__`` (one ``object.__setattr__`` per
    field) was a fifth of a consumer's decode time.
    """

    message_id: str
    partition: int
    key: str | None
    value: bytes
    properties: dict[str, str]
    publish_time_ms: int = 0
    redelivery_count: int = 0
    replicated_from: str | None = None
    source_message_id: str | None = None


def decode_messages_answer(data: bytes) -> list[Received]:
    """Every delivered message of a *messages* answer, in order.

    Hot in every consumer (a demo worker decodes each record it reads here), so
    an entry's messages are read straight out of ``data`` (no copy of its body)
    and a whole entry without a selection skips the intermediate list.
    """
    off = _check_prelude(data, MESSAGES)
    out: list[Received] = []
    append = out.append
    make = tuple.__new__  # NamedTuple's own __new__ is a Python-level call per message
    total = len(data)
    try:
        (n,) = _u32.unpack_from(data, off)
        off += 4
        for _ in range(n):
            partition, lid, eid, publish, flags = _entry.unpack_from(data, off)
            off += _entry.size
            source = None
            if flags & _replicated:
                (cl,) = _u16.unpack_from(data, off)
                cluster = data[off + 2:off + 2 + cl].decode()
                off += 2 + cl
                slid, seid = _src.unpack_from(data, off)
                off += _src.size
                source = (cluster, slid, seid)
            (count,) = _u32.unpack_from(data, off)
            off += 4
            selection: list[tuple[int, int]] | None = None
            if flags & _selection:
                (ns,) = _u32.unpack_from(data, off)
                off += 4
                selection = [_selected.unpack_from(data, off + k * _selected.size) for k in range(ns)]
                off += ns * _selected.size
            (size,) = _u32.unpack_from(data, off)
            off += 4
            end = off + size
            if end > total:
                raise MalformedError("an entry runs past the answer")
            base = f"{lid}:{eid}"
            if selection is None and source is None:
                # The common case: every message of a local entry, none redelivered.
                if count == 1:
                    value, key, props, off = message_at(data, off, end)
                    append(make(Received, (base, partition, key, value, props, publish, 0, None, None)))
                else:
                    off = _whole_entry(data, off, end, count, base, partition, publish, append)
                if off != end:
                    raise MalformedError("bytes after the last message of an entry")
                continue
            msgs = []
            pos = off
            for _ in range(count):
                value, key, props, pos = message_at(data, pos, end)
                msgs.append((value, key, props))
            off = end
            picks = selection if selection is not None else [(i, 0) for i in range(count)]
            for bi, redeliveries in picks:
                if bi >= count:
                    raise MalformedError(f"batch index {bi} outside an entry of {count}")
                value, key, props = msgs[bi]
                mid = base if count == 1 else f"{base}:{bi}"
                src_id = None
                if source is not None:
                    src_id = f"{source[1]}:{source[2]}" if count == 1 else f"{source[1]}:{source[2]}:{bi}"
                append(make(Received, (mid, partition, key, value, props, publish, redeliveries,
                                       source[0] if source else None, src_id)))
    except struct.error:
        raise MalformedError("messages answer ends early") from None
    except UnicodeDecodeError:
        raise MalformedError("a key, property or cluster name is not UTF-8") from None
    return out


def _whole_entry(data: bytes, off: int, end: int, count: int, base: str, partition: int, publish: int,
                 append: Callable[[Received], None]) -> int:
    """Append every message of an entry of ``count`` (> 1) messages; the offset after them.

    The messages of one entry mostly carry the same properties (a producer's
    transaction and name): a block equal, byte for byte, to the one before is not
    decoded again (a block is self-delimiting, so equal bytes are equal properties).
    """
    make = tuple.__new__
    head, u32 = _msg_head.unpack_from, _u32.unpack_from
    last_block = b""
    last_props: dict[str, str] = {}
    for bi in range(count):
        _, klen = head(data, off)
        off += 8
        key = None
        if klen >= 0:
            key = data[off:off + klen].decode()
            off += klen
        if last_block and data.startswith(last_block, off):
            props = dict(last_props)
            off += len(last_block)
        else:
            start = off
            props, off = _properties_at(data, off)
            last_block, last_props = data[start:off], dict(props)
        (vlen,) = u32(data, off)
        off += 4
        nxt = off + vlen
        if nxt > end:
            raise MalformedError("truncated message value")
        append(make(Received, (f"{base}:{bi}", partition, key, data[off:nxt], props, publish, 0, None, None)))
        off = nxt
    return off


def message_at(data: bytes, off: int, end: int) -> tuple[bytes, str | None, dict[str, str], int]:
    """The message stored at ``off`` (ending by ``end``): value, key, properties, next offset.

    MalformedError when its value runs past ``end``; struct.error or UnicodeDecodeError
    on other damage (the callers turn them into their own errors)."""
    _, klen = _msg_head.unpack_from(data, off)
    off += 8
    key = None
    if klen >= 0:
        key = data[off:off + klen].decode()
        off += klen
    props, off = _properties_at(data, off)
    (vlen,) = _u32.unpack_from(data, off)
    off += 4
    nxt = off + vlen
    if nxt > end:
        raise MalformedError("truncated message value")
    return data[off:nxt], key, props, nxt


def _properties_at(data: bytes, off: int) -> tuple[dict[str, str], int]:
    """The property block at ``off``: the properties and the offset after the block (struct.error
    or UnicodeDecodeError when bad; the callers turn them into their own errors)."""
    u16, u32 = _u16.unpack_from, _u32.unpack_from
    (nprops,) = u16(data, off)
    off += 2
    props: dict[str, str] = {}
    for _ in range(nprops):
        (nl,) = u16(data, off)
        name = data[off + 2:off + 2 + nl].decode()
        off += 2 + nl
        (vl,) = u32(data, off)
        props[name] = data[off + 4:off + 4 + vl].decode()
        off += 4 + vl
    return props, off


# --- acks -----------------------------------------------------------------------------


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
    flags = (_has_txn if txn is not None else 0) | (_cumulative if cumulative else 0)
    parts = [_prelude_of(ACKS), _u8.pack(flags)]
    if txn is not None:
        parts.append(_txn.pack(*txn))
    parts.append(_u32.pack(len(rows)))
    parts += [_ack.pack(lid, eid, -1 if bi is None else bi) for lid, eid, bi in rows]
    return b"".join(parts)


def decode_acks(data: bytes) -> Acks:
    off = _check_prelude(data, ACKS)
    try:
        (flags,) = _u8.unpack_from(data, off)
        off += 1
        if flags & ~(_has_txn | _cumulative):
            raise MalformedError(f"unknown ack flags {flags:#x}")
        txn: TxnId | None = None
        if flags & _has_txn:
            txn = from_pair(_txn.unpack_from(data, off))
            off += _txn.size
        (n,) = _u32.unpack_from(data, off)
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
