"""Transaction-log records: a pure, versioned binary codec.

Every record starts with a two-byte header; integers are big-endian unsigned,
strings are UTF-8 with a u16 byte length in front::

    offset  size  field
    0       1     type      1 NEW, 2 ADD_PARTITIONS, 3 ADD_SUBSCRIPTIONS, 4 STATUS, 5 RESERVE_IDS,
                            6 FORWARDED
    1       1     version   1
    2       ...   body, by type:

    NEW                txn_most u64, txn_least u64, timeout_ms u64, opened_at_ms u64[, len u16, owner]
    ADD_PARTITIONS     txn_most u64, txn_least u64, count u16, count x (len u16, partition)
    ADD_SUBSCRIPTIONS  txn_most u64, txn_least u64, count u16, count x (len u16, topic, len u16, subscription)
    STATUS             txn_most u64, txn_least u64, state u8, reason u8, at_ms u64
    RESERVE_IDS        counter_hi u64, counter_lo u64   (every counter below this may be in use)
    FORWARDED          request_id 16 bytes, then one whole record of types 1..5 (its header included)

FORWARDED wraps a record appended while serving a request that came through a
worker mailbox (``streamtx/ownership/mailbox.py``): ``request_id`` is the id the
receiving worker gave it. A new owner of the log, replaying it, knows which
mailbox requests were already applied, and answers them from its state instead
of applying them again (``coordinator/forwarding.py``).

``opened_at_ms`` and ``at_ms`` are wall-clock milliseconds since the epoch, so
timeouts and retention survive restarts. ``owner`` is the subject of the
token that opened the transaction (only that client may touch it, when auth
is on); absent (no bytes at all) when there was none, as in records written
before owners were kept. ``state`` and ``reason`` are the codes
of :class:`~streamtx.records.txnstate.TxnState` and ``EndReason``.

The buffered writer marks a batched entry with the magic bytes ``0x0e 0x01``
and reads any entry without them as one unbatched record, so no record may
begin with ``0x0e``: the type byte is always 1..6.

This module is pure: no I/O.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

from streamtx.contracts.txnid import TxnId
from streamtx.errors import CorruptEntryError
from streamtx.ledger.base import Position
from streamtx.records.txnstate import EndReason, TxnState

version = 1
T_NEW, T_ADD_PARTITIONS, T_ADD_SUBSCRIPTIONS, T_STATUS, T_RESERVE_IDS, T_FORWARDED = 1, 2, 3, 4, 5, 6
request_id_bytes = 16

_new = struct.Struct(">BBQQQQ")
_txn_count = struct.Struct(">BBQQH")
_status = struct.Struct(">BBQQBBQ")
_reserve = struct.Struct(">BBQQ")
_u16 = struct.Struct(">H")
_new_unpack = _new.unpack
_new_size = _new.size
_status_unpack = _status.unpack
_tuple_new = tuple.__new__
_states = tuple(TxnState)  # index = code (codes are 0..n-1, in order)
_reasons = tuple(EndReason)
_u64_mask = (1 << 64) - 1
max_string_bytes = 0xFFFF
max_items = 0xFFFF


class LogRef(NamedTuple):
    """Where one record lives: its entry and its index in that entry (PIP-160)."""

    position: Position
    batch_index: int
    batch_size: int


class Subscription(NamedTuple):
    """A subscription registered with a transaction: the topic (partition) and its name."""

    topic: str
    subscription: str


@dataclass(slots=True)
class NewTxn:
    """A transaction was opened."""

    txn: TxnId
    timeout_ms: int
    opened_at_ms: int
    owner: str = ""


@dataclass(slots=True)
class AddPartitions:
    """Partitions were registered with a transaction."""

    txn: TxnId
    partitions: tuple[str, ...]


@dataclass(slots=True)
class AddSubscriptions:
    """Subscriptions were registered with a transaction."""

    txn: TxnId
    subscriptions: tuple[Subscription, ...]


@dataclass(slots=True)
class StatusChange:
    """A transaction moved to ``state`` at ``at_ms`` (``reason`` says why it ended)."""

    txn: TxnId
    state: TxnState
    reason: EndReason
    at_ms: int


@dataclass(slots=True)
class ReserveIds:
    """Counters below ``next_counter`` may have been handed out: never reuse them."""

    next_counter: int


Plain = NewTxn | AddPartitions | AddSubscriptions | StatusChange | ReserveIds


@dataclass(slots=True)
class Forwarded:
    """``record`` was appended serving the mailbox request ``request_id``."""

    request_id: bytes
    record: Plain


Record = Plain | Forwarded


def encode(record: Record) -> bytes:
    """The bytes of one record (ValueError when a field does not fit its width)."""
    if isinstance(record, Forwarded):
        if len(record.request_id) != request_id_bytes:
            raise ValueError(f"a request id is {request_id_bytes} bytes, not {len(record.request_id)}")
        return bytes((T_FORWARDED, version)) + record.request_id + encode(record.record)
    if isinstance(record, NewTxn):
        t = record.txn
        head = _new.pack(T_NEW, version, t.most, t.least, record.timeout_ms, record.opened_at_ms)
        return head + _string(record.owner) if record.owner else head
    if isinstance(record, StatusChange):
        t = record.txn
        return _status.pack(T_STATUS, version, t.most, t.least, record.state, record.reason, record.at_ms)
    if isinstance(record, AddPartitions):
        parts = [_txn_count.pack(T_ADD_PARTITIONS, version, *record.txn, _count(record.partitions))]
        parts.extend(_string(p) for p in record.partitions)
        return b"".join(parts)
    if isinstance(record, AddSubscriptions):
        subs = record.subscriptions
        parts = [_txn_count.pack(T_ADD_SUBSCRIPTIONS, version, *record.txn, _count(subs))]
        for s in subs:
            parts.append(_string(s.topic))
            parts.append(_string(s.subscription))
        return b"".join(parts)
    counter = record.next_counter
    return _reserve.pack(T_RESERVE_IDS, version, counter >> 64, counter & _u64_mask)


def decode(data: bytes) -> Record:
    """Decode one record; CorruptEntryError when the bytes are not exactly one record."""
    # The replay hot path: ids are built with tuple.__new__ and enums looked up
    # by index, each several times cheaper than the classes' own constructors.
    try:
        kind = data[0]
        if data[1] != version:
            raise CorruptEntryError(f"transaction-log record version {data[1]} is not {version}")
        if kind == T_NEW:
            if len(data) == _new_size:
                _, _, most, least, timeout_ms, opened_at_ms = _new_unpack(data)
                return NewTxn(_tuple_new(TxnId, (most, least)), timeout_ms, opened_at_ms)
            _, _, most, least, timeout_ms, opened_at_ms = _new.unpack_from(data)
            owner, end = _strings(data, _new_size, 1)
            _expect_end(data, end)
            return NewTxn(_tuple_new(TxnId, (most, least)), timeout_ms, opened_at_ms, owner[0])
        if kind == T_STATUS:
            _, _, most, least, state, reason, at_ms = _status_unpack(data)
            return StatusChange(_tuple_new(TxnId, (most, least)), _states[state], _reasons[reason], at_ms)
        if kind == T_ADD_PARTITIONS:
            _, _, most, least, count = _txn_count.unpack_from(data)
            partitions, end = _strings(data, _txn_count.size, count)
            _expect_end(data, end)
            return AddPartitions(_tuple_new(TxnId, (most, least)), tuple(partitions))
        if kind == T_ADD_SUBSCRIPTIONS:
            _, _, most, least, count = _txn_count.unpack_from(data)
            flat, end = _strings(data, _txn_count.size, 2 * count)
            _expect_end(data, end)
            subs = tuple([_tuple_new(Subscription, pair) for pair in zip(flat[::2], flat[1::2], strict=True)])
            return AddSubscriptions(_tuple_new(TxnId, (most, least)), subs)
        if kind == T_RESERVE_IDS:
            _, _, hi, lo = _reserve.unpack(data)
            return ReserveIds((hi << 64) | lo)
        if kind == T_FORWARDED:
            inner = decode(data[2 + request_id_bytes:])
            if len(data) < 4 + request_id_bytes or isinstance(inner, Forwarded):
                raise ValueError("a forwarded record wraps one record of another type")
            return Forwarded(data[2:2 + request_id_bytes], inner)
    except (struct.error, ValueError, IndexError) as exc:
        raise CorruptEntryError(f"bad transaction-log record: {exc}") from exc
    raise CorruptEntryError(f"unknown transaction-log record type {kind}")


def txn_event(data: bytes) -> tuple[tuple[int, int], int, TxnState | None] | None:
    """A NEW or STATUS record's transaction, time and state, reading only its fixed head.

    ``((most, least), opened_at_ms, None)`` for NEW (with or without the owner
    auth adds), ``((most, least), at_ms, state)`` for STATUS, either one inside a
    FORWARDED record too; None for the other types. The histograms job's fast
    path: it needs no owner, partition or subscription strings.
    """
    try:
        if data[0] == T_FORWARDED:
            if data[1] != version:
                raise ValueError(f"version {data[1]} is not {version}")
            data = data[2 + request_id_bytes:]
        kind = data[0]
        if kind != T_NEW and kind != T_STATUS:
            if kind in (T_ADD_PARTITIONS, T_ADD_SUBSCRIPTIONS, T_RESERVE_IDS):
                return None
            raise ValueError(f"unknown type {kind}")
        if data[1] != version:
            raise ValueError(f"version {data[1]} is not {version}")
        if kind == T_NEW:
            _, _, most, least, _, opened_at_ms = _new.unpack_from(data)
            return (most, least), opened_at_ms, None
        _, _, most, least, state, _, at_ms = _status_unpack(data)
        return (most, least), at_ms, _states[state]
    except (struct.error, ValueError, IndexError) as exc:
        raise CorruptEntryError(f"bad transaction-log record: {exc}") from exc


def _count(items: tuple[object, ...]) -> int:
    if len(items) > max_items:
        raise ValueError(f"{len(items)} items do not fit one record (max {max_items})")
    return len(items)


def _string(text: str) -> bytes:
    raw = text.encode()
    if len(raw) > max_string_bytes:
        raise ValueError(f"a string of {len(raw)} bytes does not fit a record (max {max_string_bytes})")
    return _u16.pack(len(raw)) + raw


def _strings(data: bytes, offset: int, count: int) -> tuple[list[str], int]:
    out: list[str] = []
    size = len(data)
    for _ in range(count):
        start = offset + 2
        end = start + (data[offset] << 8 | data[offset + 1])  # u16 length, inline: hot path
        if end > size:
            raise ValueError("string runs past the end of the record")
        out.append(data[start:end].decode())
        offset = end
    return out, offset


def _expect_end(data: bytes, end: int) -> None:
    if end != len(data):
        raise ValueError(f"{len(data) - end} trailing bytes")
