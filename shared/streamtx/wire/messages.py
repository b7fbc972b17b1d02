"""The message area of the binary batch format: one layout for the wire and the disk. Pure, no I/O.

A produced section's body, a fetched entry's body and a stored partition entry's
message area (:mod:`streamtx.records.partition`, after its header) are the same bytes,
so this module is the one encoder, decoder and validator of them; the request
and answer frames around them are in :mod:`.produce` and :mod:`.fetch`.

**A message** (the stored entry layout, ``count`` of them back to back)::

    u32  request_index    the message's place in the produce request
    i32  key_len          -1 when there is no key
    key utf-8
    u16  n_properties, then n × (u16 len, utf-8 name, u32 len, utf-8 value)
    u32  value_len, value bytes
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import NamedTuple

from streamtx.errors import MalformedError
from streamtx.wire.frame import U16, U32

_i32 = struct.Struct(">i")
MSG_HEAD = struct.Struct(">Ii")  # u32 request_index, i32 key_len


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
    :mod:`streamtx.records.partition`)."""
    parts: list[bytes] = []
    u32, i32, u16 = U32.pack, _i32.pack, U16.pack
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


def encode_keyed(values: Sequence[bytes], keys: Sequence[bytes], properties: Mapping[str, str],
                 first_index: int = 0) -> bytes:
    """Messages that share one properties map (a producer's transaction and name), with keys
    already utf-8, in the stored layout numbered from ``first_index``: the bytes
    :func:`encode_fields` gives, without a tuple per message (a worker's outputs)."""
    props = [U16.pack(len(properties))]
    for name, text in properties.items():
        n, v = name.encode(), text.encode()
        props += [U16.pack(len(n)), n, U32.pack(len(v)), v]
    block = b"".join(props)
    head, u32 = MSG_HEAD.pack, U32.pack
    parts: list[bytes] = []
    for i, (value, key) in enumerate(zip(values, keys, strict=True), first_index):
        parts += (head(i, len(key)), key, block, u32(len(value)), value)
    return b"".join(parts)


#: One decoded message: ``(value, key, properties, request_index)``.
Fields = tuple[bytes, str | None, dict[str, str], int]


def decode_fields(body: bytes | memoryview, count: int, offset: int = 0, *,
                  error: type[Exception] = MalformedError) -> list[Fields]:
    """``count`` messages of the stored layout from ``offset``: the one decoder of the message
    area (this format's sections and the partition entries, :mod:`streamtx.records.partition`);
    ``error`` (MalformedError, or the caller's) when the bytes are bad.

    Tuples, not objects: this is the fetch path's decoder, and a frozen dataclass per
    message costs more than the tuple.
    """
    data = bytes(body) if isinstance(body, memoryview) else body
    out: list[Fields] = []
    off, end = offset, len(data)
    u32 = U32.unpack_from
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
    keys: list[bytes] = []  # checked as UTF-8 at the end, in one decode
    u32, u16, head = U32.unpack_from, U16.unpack_from, MSG_HEAD.unpack_from
    try:
        for i in range(first_index, first_index + count):
            req, klen = head(data, off)
            if req != i:
                raise MalformedError(f"message {i}: request index {req}, expected {i}")
            off += 8
            if klen >= 0:
                if off + klen > end:
                    raise MalformedError(f"message {i}: key runs past the section")
                keys.append(raw[off:off + klen])
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
        # NUL is a whole character that no multi-byte sequence contains: the join is UTF-8
        # exactly when every key is (one decode, not a call per message).
        str(b"\0".join(keys), "utf-8")
    except struct.error:
        raise MalformedError("section ends inside a message") from None
    except UnicodeDecodeError as exc:
        raise MalformedError(f"a key or property is not UTF-8: {exc.reason}") from None
    if off != end:
        raise MalformedError(f"{end - off} bytes after the last message of a section")
    return values


def message_at(data: bytes, off: int, end: int) -> tuple[bytes, str | None, dict[str, str], int]:
    """The message stored at ``off`` (ending by ``end``): value, key, properties, next offset.

    MalformedError when its value runs past ``end``; struct.error or UnicodeDecodeError
    on other damage (the callers turn them into their own errors)."""
    _, klen = MSG_HEAD.unpack_from(data, off)
    off += 8
    key = None
    if klen >= 0:
        key = data[off:off + klen].decode()
        off += klen
    props, off = properties_at(data, off)
    (vlen,) = U32.unpack_from(data, off)
    off += 4
    nxt = off + vlen
    if nxt > end:
        raise MalformedError("truncated message value")
    return data[off:nxt], key, props, nxt


def properties_at(data: bytes, off: int) -> tuple[dict[str, str], int]:
    """The property block at ``off``: the properties and the offset after the block (struct.error
    or UnicodeDecodeError when bad; the callers turn them into their own errors)."""
    u16, u32 = U16.unpack_from, U32.unpack_from
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
