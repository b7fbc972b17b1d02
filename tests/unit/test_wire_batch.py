"""The binary batch wire format (streamtx.wire.batch): round trips, the stored layout, bad input."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamtx.errors import MalformedError
from streamtx.records import partition as codec
from streamtx.wire import batch as wire

texts = st.text(max_size=12)
msgs = st.builds(wire.Msg, st.binary(max_size=64), st.none() | texts,
                 st.dictionaries(st.text(min_size=1, max_size=8), texts, max_size=3))
sections = st.lists(st.tuples(st.integers(0, 1000), st.lists(msgs, max_size=6)), max_size=4)
txns = st.none() | st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))
producers = st.none() | st.tuples(st.text(min_size=1, max_size=10), st.integers(0, 2**64 - 1),
                                  st.integers(0, 2**64 - 1))


@settings(max_examples=40)
@given(sections, txns, producers)
def test_produce_round_trip(secs: list[tuple[int, list[wire.Msg]]], txn: tuple[int, int] | None,
                            producer: tuple[str, int, int] | None) -> None:
    got = wire.decode_produce(wire.encode_produce(secs, txn=txn, producer=producer))
    assert got.txn == txn and got.producer == producer
    assert [s.partition for s in got.sections] == [p for p, _ in secs]
    first = 0
    for s, (_, ms) in zip(got.sections, secs, strict=True):
        assert (s.count, s.first_index) == (len(ms), first)
        assert wire.validate_messages(s.body, s.count, s.first_index) == sum(len(m.value) for m in ms)
        assert wire.decode_messages(s.body, s.count) == [(m.value, m.key, dict(m.properties)) for m in ms]
        first += s.count


keyed_rows = st.lists(st.tuples(st.binary(max_size=64), texts), max_size=6)


@settings(max_examples=40)
@given(st.lists(st.tuples(st.integers(0, 1000), keyed_rows), max_size=4),
       st.dictionaries(st.text(min_size=1, max_size=8), texts, max_size=3), txns)
def test_a_keyed_produce_is_the_produce_of_its_messages(
        secs: list[tuple[int, list[tuple[bytes, str]]]], props: dict[str, str],
        txn: tuple[int, int] | None) -> None:
    keyed = [(p, [v for v, _ in rows], [k.encode() for _, k in rows]) for p, rows in secs]
    plain = [(p, [wire.Msg(v, k, props) for v, k in rows]) for p, rows in secs]
    assert wire.encode_produce_keyed(keyed, props, txn=txn) == wire.encode_produce(plain, txn=txn)


@settings(max_examples=40)
@given(st.lists(msgs, min_size=1, max_size=8), txns, st.integers(0, 2**40))
def test_a_section_is_the_stored_entry_layout(ms: list[wire.Msg], txn: tuple[int, int] | None,
                                             publish: int) -> None:
    # The broker stores a validated section behind its own header, byte for byte what it
    # would have encoded from decoded messages: JSON and binary produces read back alike.
    count, body = wire.encode_messages(ms)
    raw = codec.encode_raw_batch(body, count, publish_time_ms=publish, txn=txn)
    decoded = [codec.Message(m.value, m.key, dict(m.properties), i) for i, m in enumerate(ms)]
    assert raw == codec.encode_batch(decoded, publish_time_ms=publish, txn=txn)
    assert codec.decode_messages(raw) == decoded


@settings(max_examples=40)
@given(st.lists(st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.integers(1, 50)),
                max_size=5))
def test_produced_ids(rows: list[tuple[int, int, int]]) -> None:
    expected = [i for lid, eid, n in rows for i in
                ([f"{lid}:{eid}"] if n == 1 else [f"{lid}:{eid}:{b}" for b in range(n)])]
    assert wire.decode_produced(wire.encode_produced(rows)) == expected


@settings(max_examples=40)
@given(st.lists(st.tuples(st.integers(0, 2**32 - 1), st.lists(msgs, min_size=1, max_size=5),
                          st.booleans(), st.booleans()), max_size=4))
def test_messages_answer_round_trip(entries: list[tuple[int, list[wire.Msg], bool, bool]]) -> None:
    rows, expected = [], []
    for k, (partition, ms, partial, replicated) in enumerate(entries):
        count, body = wire.encode_messages(ms)
        picks = [(i, i % 3) for i in range(0, count, 2)] if partial else None
        source = ("east", 7, 100 + k) if replicated else None
        rows.append(wire.Delivered(partition, 3, k, 1000 + k, count, body, picks, source))
        for bi, rc in picks if picks is not None else [(i, 0) for i in range(count)]:
            m = ms[bi]
            suffix = "" if count == 1 else f":{bi}"
            expected.append(wire.Received(f"3:{k}{suffix}", partition, m.key, m.value, dict(m.properties),
                                          1000 + k, rc, "east" if replicated else None,
                                          f"7:{100 + k}{suffix}" if replicated else None))
    assert wire.decode_messages_answer(wire.encode_messages_answer(rows)) == expected



@settings(max_examples=60)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 50), st.lists(msgs, min_size=1, max_size=5),
                          st.booleans(), st.booleans()), max_size=6))
def test_values_read_as_the_full_decode_reads_them(
        entries: list[tuple[int, int, list[wire.Msg], bool, bool]]) -> None:
    # The probe's lean read must see the values the full decode sees, and name as each
    # partition's last id the highest id it was handed (entry ids in any order: redeliveries
    # come first in an answer).
    rows = []
    for partition, eid, ms, partial, replicated in entries:
        count, body = wire.encode_messages(ms)
        picks = [(i, 1) for i in range(count - 1, -1, -2)] if partial else None
        rows.append(wire.Delivered(partition, 3, eid, 5, count, body, picks,
                                   ("east", 7, eid) if replicated else None))
    data = wire.encode_messages_answer(rows)
    full = wire.decode_messages_answer(data)
    got = wire.decode_values(data)
    assert got.values == [m.value for m in full] and got.ids is None
    located = wire.decode_values(data, ids=True)  # the workers' read: each value's id and partition
    assert located.values == got.values and located.last_ids == got.last_ids
    assert located.ids == [m.message_id for m in full] and located.partitions == [m.partition for m in full]
    highest: dict[int, tuple[tuple[int, int], str]] = {}
    for m in full:
        _, eid, *bi = m.message_id.split(":")
        at = (int(eid), int(bi[0]) if bi else 0)
        if m.partition not in highest or at > highest[m.partition][0]:
            highest[m.partition] = (at, m.message_id)
    assert got.last_ids == {p: mid for p, (_, mid) in highest.items()}
    for cut in range(len(data) - 1, max(len(data) - 30, 5), -1):
        with pytest.raises(MalformedError):
            wire.decode_values(data[:cut])


def test_repeated_properties_decode_alike_and_apart() -> None:
    # A block equal to the previous message's is not decoded again: the messages must
    # still read as encoded, each with a dict of its own.
    props = [{"txn": "1:2", "w": "w0"}, {"txn": "1:2", "w": "w0"}, {}, {"txn": "1:2", "w": "w1"},
             {"txn": "1:2", "w": "w1"}, {"txn": "1:2", "w": "w0"}]
    ms = [wire.Msg(b"v%d" % i, None if i % 2 else f"k{i}", p) for i, p in enumerate(props)]
    count, body = wire.encode_messages(ms)
    got = wire.decode_messages_answer(wire.encode_messages_answer([wire.Delivered(2, 9, 4, 7, count, body)]))
    assert [(m.message_id, m.key, m.value, m.properties) for m in got] == [
        (f"9:4:{i}", m.key, m.value, m.properties) for i, m in enumerate(ms)]
    got[0].properties["x"] = "y"
    assert got[1].properties == props[1]
    cut = wire.encode_messages_answer([wire.Delivered(2, 9, 4, 7, count, body[:-1])])
    with pytest.raises(MalformedError):  # a value cut short inside a run of equal blocks
        wire.decode_messages_answer(cut)


ids = st.lists(st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1),
                         st.none() | st.integers(0, 2**31 - 1)).map(
    lambda t: f"{t[0]}:{t[1]}" if t[2] is None else f"{t[0]}:{t[1]}:{t[2]}"), max_size=20)


@settings(max_examples=40)
@given(ids, txns, st.booleans())
def test_acks_round_trip(message_ids: list[str], txn: tuple[int, int] | None, cumulative: bool) -> None:
    got = wire.decode_acks(wire.encode_acks(message_ids, txn=txn, cumulative=cumulative))
    assert (got.id_strings(), got.txn, got.cumulative) == (message_ids, txn, cumulative)


def test_content_type_negotiation() -> None:
    assert wire.is_batch("application/x-streamtx-batch")
    assert wire.is_batch("application/x-streamtx-batch, application/json;q=0.5")
    assert not wire.is_batch("application/json") and not wire.is_batch(None)


def _section(body: bytes, count: int) -> bytes:
    return b"".join([wire.MAGIC, bytes([1, wire.PRODUCE, 0]), struct.pack(">I", 1),
                     struct.pack(">III", 0, count, len(body)), body])


def test_bad_produce_bodies_are_refused() -> None:
    count, good = wire.encode_messages([wire.Msg(b"v", "k", {"a": "b"})])
    assert wire.validate_messages(good, count, 0) == 1
    bad = {
        "truncated value": (good[:-1], 1, 0),
        "request index": (good, 1, 5),
        "trailing bytes": (good + b"x", 1, 0),
        "count beyond the body": (good, 2, 0),
        "key not utf-8": (wire.encode_messages([wire.Msg(b"", "k")])[1].replace(b"k", b"\xff"), 1, 0),
        "property value not utf-8": (wire.encode_messages([wire.Msg(b"", None, {"n": "x"})])[1]
                                     .replace(b"x", b"\xc3"), 1, 0),
        "property past the end": (wire.encode_messages([wire.Msg(b"", None, {"n": "x"})])[1][:12], 1, 0),
        "bad key length": (struct.pack(">Ii", 0, -7) + b"\0\0" + struct.pack(">I", 0), 1, 0),
    }
    for why, (body, n, first) in bad.items():
        with pytest.raises(MalformedError):
            wire.validate_messages(body, n, first)
            pytest.fail(why)
    frame = wire.decode_produce(_section(good, 1))
    assert frame.sections[0].body == good
    whole = _section(good, 1)
    for body in (b"", b"STX", b"XXXX" + whole[4:], whole[:-1], whole + b"!", wire.encode_acks(["1:2"])):
        with pytest.raises(MalformedError):
            wire.decode_produce(body)
    with pytest.raises(MalformedError):
        wire.decode_acks(wire.encode_acks(["1:2"])[:-1])
    with pytest.raises(MalformedError):
        wire.decode_acks(wire.encode_acks(["1:2"]) + b"\0")


def _raw_keys(keys: list[bytes]) -> bytes:
    """Messages with these key bytes (UTF-8 or not), no properties, empty values."""
    return b"".join(struct.pack(">Ii", i, len(k)) + k + struct.pack(">HI", 0, 0) for i, k in enumerate(keys))


@settings(max_examples=200)
@given(st.lists(st.binary(max_size=4) | st.text(max_size=3).map(str.encode), min_size=1, max_size=5))
def test_keys_are_refused_exactly_when_one_is_not_utf8(keys: list[bytes]) -> None:
    def utf8(k: bytes) -> bool:
        try:
            k.decode()
        except UnicodeDecodeError:
            return False
        return True

    if all(utf8(k) for k in keys):
        assert wire.validate_messages(_raw_keys(keys), len(keys), 0) == 0
    else:
        with pytest.raises(MalformedError):
            wire.validate_messages(_raw_keys(keys), len(keys), 0)


def test_a_character_split_over_two_keys_is_refused() -> None:
    # b"\xc3" + b"\xa9" is "é": each half alone is not UTF-8.
    with pytest.raises(MalformedError):
        wire.validate_messages(_raw_keys([b"a\xc3", b"\xa9b"]), 2, 0)


@settings(max_examples=150)
@given(st.binary(max_size=80), st.integers(0, 5))
def test_any_bytes_are_a_batch_or_malformed(tail: bytes, count: int) -> None:
    # What the broker is sent decides a 400 or a store, never an unhandled error (a 500).
    for kind, decode in ((wire.PRODUCE, wire.decode_produce), (wire.ACKS, wire.decode_acks)):
        try:
            decode(wire.MAGIC + bytes([wire.VERSION, kind]) + tail)
        except MalformedError:
            pass
    try:
        wire.validate_messages(tail, count, 0)
    except MalformedError:
        pass
