"""The partition entry codec: round trips and message ids."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamtx.contracts.msgid import MessageId
from streamtx.errors import CorruptEntryError
from streamtx.records import partition as codec
from streamtx.records.partition import EntryKind, Message, ProducerInfo

u64 = st.integers(0, (1 << 64) - 1)
text = st.text(max_size=20)
messages = st.lists(
    st.builds(Message, value=st.binary(max_size=64), key=st.none() | text,
              properties=st.dictionaries(text, text, max_size=3), request_index=st.integers(0, 10_000)),
    min_size=1, max_size=8,
)


@given(messages, st.none() | st.tuples(u64, u64),
       st.none() | st.builds(ProducerInfo, name=st.text(min_size=1, max_size=10), epoch=u64, sequence=u64),
       st.integers(0, 1 << 50))
def test_batch_round_trip(msgs: list[Message], txn: tuple[int, int] | None,
                          producer: ProducerInfo | None, publish: int) -> None:
    data = codec.encode_batch(msgs, publish_time_ms=publish, txn=txn, producer=producer)
    h = codec.decode_header(data)
    assert (h.kind, h.txn, h.producer, h.publish_time_ms, h.count) == (
        EntryKind.BATCH, txn, producer, publish, len(msgs))
    assert codec.decode_messages(data) == msgs


def test_markers_and_producer_entries() -> None:
    for kind in (EntryKind.COMMIT, EntryKind.ABORT):
        h = codec.decode_header(codec.encode_marker(kind, (7, 9), publish_time_ms=5))
        assert (h.kind, h.txn, h.count) == (kind, (7, 9), 0)
    with pytest.raises(ValueError):
        codec.encode_marker(EntryKind.BATCH, (1, 1), publish_time_ms=0)
    p = ProducerInfo("p", 3, 4)
    h = codec.decode_header(codec.encode_producer(p, publish_time_ms=1))
    assert (h.kind, h.producer, h.txn) == (EntryKind.PRODUCER, p, None)


def test_corrupt_entries_raise() -> None:
    data = codec.encode_batch([Message(b"hello", "k")], publish_time_ms=1)
    with pytest.raises(CorruptEntryError):
        codec.decode_header(b"\x09" + data[1:])
    with pytest.raises(CorruptEntryError):
        codec.decode_messages(data[:-2])
    with pytest.raises(CorruptEntryError):
        codec.decode_header(b"\x01")


def test_message_ids() -> None:
    assert codec.message_id(1, 2, 0, 1) == "1:2"
    assert codec.message_id(1, 2, 3, 4) == "1:2:3"
    assert codec.message_id(1 << 63, 2, 3, 4) == str(MessageId(1 << 63, 2, 3))  # the one formatter


def test_replicated_entries_carry_their_source() -> None:
    src = codec.SourceInfo("a", 842504270, 17, 1_795_000_000_000)
    p = codec.ProducerInfo("pulsar.repl.a", 0, 17)
    data = codec.encode_batch([codec.Message(b"v", "k", {"x": "y"})], publish_time_ms=9, producer=p,
                              source=src)
    h = codec.decode_header(data)
    assert (h.kind, h.source, h.producer, h.txn, h.publish_time_ms) == (EntryKind.BATCH, src, p, None, 9)
    assert codec.decode_messages(data, h) == [codec.Message(b"v", "k", {"x": "y"})]
    assert codec.decode_header(codec.encode_batch([], publish_time_ms=1)).source is None


def test_replication_marker_round_trip() -> None:
    body = b'{"type":"snapshot_request","id":"x"}'
    data = codec.encode_replication_marker(body, publish_time_ms=3, source=codec.SourceInfo("b", 1, 2))
    h = codec.decode_header(data)
    assert (h.kind, h.count, h.source) == (EntryKind.MARKER, 0, codec.SourceInfo("b", 1, 2))
    assert codec.marker_body(data, h) == body
