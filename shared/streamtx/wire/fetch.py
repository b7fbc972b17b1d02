"""The *messages* answer of the binary batch format: what a fetch hands out. Pure, no I/O.

The broker puts its stored entries in as they are (:class:`Delivered`, their
message areas undecoded); a consumer reads every delivered message out of it
(:class:`Received`), in place: that decoder is hot in every consumer.

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
with another consumer). Message ids as for *produced* (:mod:`.produce`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from streamtx.errors import MalformedError
from streamtx.wire.frame import MESSAGES, U16, U32, check_prelude, prelude_of
from streamtx.wire.messages import MSG_HEAD, message_at, properties_at

_entry = struct.Struct(">IQQqB")
_src = struct.Struct(">QQ")
_selected = struct.Struct(">II")

_replicated, _selection = 1, 2


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
    parts: list[bytes | memoryview] = [prelude_of(MESSAGES), U32.pack(len(rows))]
    for e in rows:
        flags = (_replicated if e.source is not None else 0) | (_selection if e.selection is not None else 0)
        parts.append(_entry.pack(e.partition, e.ledger_id, e.entry_id, e.publish_time_ms, flags))
        if e.source is not None:
            cluster = e.source[0].encode()
            parts += [U16.pack(len(cluster)), cluster, _src.pack(e.source[1], e.source[2])]
        parts.append(U32.pack(e.count))
        if e.selection is not None:
            parts.append(U32.pack(len(e.selection)))
            parts += [_selected.pack(bi, rc) for bi, rc in e.selection]
        parts += [U32.pack(len(e.body)), e.body]
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
    off = check_prelude(data, MESSAGES)
    out: list[Received] = []
    append = out.append
    make = tuple.__new__  # NamedTuple's own __new__ is a Python-level call per message
    total = len(data)
    try:
        (n,) = U32.unpack_from(data, off)
        off += 4
        for _ in range(n):
            partition, lid, eid, publish, flags = _entry.unpack_from(data, off)
            off += _entry.size
            source = None
            if flags & _replicated:
                (cl,) = U16.unpack_from(data, off)
                cluster = data[off + 2:off + 2 + cl].decode()
                off += 2 + cl
                slid, seid = _src.unpack_from(data, off)
                off += _src.size
                source = (cluster, slid, seid)
            (count,) = U32.unpack_from(data, off)
            off += 4
            selection: list[tuple[int, int]] | None = None
            if flags & _selection:
                (ns,) = U32.unpack_from(data, off)
                off += 4
                selection = [_selected.unpack_from(data, off + k * _selected.size) for k in range(ns)]
                off += ns * _selected.size
            (size,) = U32.unpack_from(data, off)
            off += 4
            end = off + size
            if end > total:
                raise MalformedError("an entry runs past the answer")
            base = f"{lid}:{eid}"  # format_id's layout, once per entry (the decode's hot loop)
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


class Values(NamedTuple):
    """A *messages* answer read for its values alone (:func:`decode_values`)."""

    values: list[bytes]  # every delivered message's value, in order
    last_ids: dict[int, str]  # partition → the id of the last message delivered of it
    ids: list[str] | None = None  # with ``ids=True``: each value's message id
    partitions: list[int] | None = None  # with ``ids=True``: each value's partition


def decode_values(data: bytes, ids: bool = False) -> Values:
    """The values of a *messages* answer and the last message id of each partition: what a
    consumer that acks cumulatively and reads only values needs (the demo's probe); with
    ``ids``, each value's id and partition too (the demo's workers). No object per message
    but its value (and id): keys and properties are stepped over, not decoded."""
    off = check_prelude(data, MESSAGES)
    values: list[bytes] = []
    last: dict[int, str] = {}
    id_list: list[str] | None = [] if ids else None
    partitions: list[int] | None = [] if ids else None
    highest: dict[int, tuple[int, int]] = {}
    total = len(data)
    u16, u32 = U16.unpack_from, U32.unpack_from
    try:
        (n,) = u32(data, off)
        off += 4
        for _ in range(n):
            partition, lid, eid, _, flags = _entry.unpack_from(data, off)
            off += _entry.size
            if flags & _replicated:
                (cl,) = u16(data, off)
                off += 2 + cl + _src.size
            (count,) = u32(data, off)
            off += 4
            picks: list[int] | None = None
            if flags & _selection:
                (ns,) = u32(data, off)
                off += 4
                picks = [_selected.unpack_from(data, off + k * _selected.size)[0] for k in range(ns)]
                off += ns * _selected.size
            (size,) = u32(data, off)
            off += 4
            end = off + size
            if end > total:
                raise MalformedError("an entry runs past the answer")
            entry: list[bytes] = []
            last_block = b""
            for _ in range(count):
                (klen,) = _i32_at(data, off + 4)
                off += 8 + max(klen, 0)
                if last_block and data.startswith(last_block, off):
                    off += len(last_block)  # the same properties as the message before
                else:
                    start = off
                    (nprops,) = u16(data, off)
                    off += 2
                    for _ in range(nprops):
                        (nl,) = u16(data, off)
                        off += 2 + nl
                        (vl,) = u32(data, off)
                        off += 4 + vl
                    last_block = data[start:off]
                (vlen,) = u32(data, off)
                off += 4
                entry.append(data[off:off + vlen])
                off += vlen
            if off != end:
                raise MalformedError("an entry's messages do not fill its body")
            if picks is None:
                values += entry
                bi = count - 1
            elif picks:
                bi = max(picks)
                if bi >= count:
                    raise MalformedError(f"batch index {bi} outside an entry of {count}")
                values += [entry[i] for i in picks]
            else:
                continue
            if id_list is not None and partitions is not None:
                base = f"{lid}:{eid}"
                indexes = range(count) if picks is None else picks
                id_list += [base] if count == 1 else [f"{base}:{i}" for i in indexes]
                partitions += [partition] * len(indexes)
            at = (eid, bi)
            prev = highest.get(partition)
            if prev is None or at > prev:  # redeliveries come first: not always in order
                highest[partition] = at
                last[partition] = f"{lid}:{eid}" if count == 1 else f"{lid}:{eid}:{bi}"
    except struct.error:
        raise MalformedError("messages answer ends early") from None
    return Values(values, last, id_list, partitions)


_i32_at = struct.Struct(">i").unpack_from


def _whole_entry(data: bytes, off: int, end: int, count: int, base: str, partition: int, publish: int,
                 append: Callable[[Received], None]) -> int:
    """Append every message of an entry of ``count`` (> 1) messages; the offset after them.

    The messages of one entry mostly carry the same properties (a producer's
    transaction and name): a block equal, byte for byte, to the one before is not
    decoded again (a block is self-delimiting, so equal bytes are equal properties).
    """
    make = tuple.__new__
    head, u32 = MSG_HEAD.unpack_from, U32.unpack_from
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
            props, off = properties_at(data, off)
            last_block, last_props = data[start:off], dict(props)
        (vlen,) = u32(data, off)
        off += 4
        nxt = off + vlen
        if nxt > end:
            raise MalformedError("truncated message value")
        append(make(Received, (f"{base}:{bi}", partition, key, data[off:nxt], props, publish, 0, None, None)))
        off = nxt
    return off
