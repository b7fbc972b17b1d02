"""The pending-ack record codec: round trips, and never the batched-entry magic."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamtx.errors import CorruptEntryError, MalformedError
from streamtx.records.pendingack import (
    MessageId,
    PendingAck,
    Record,
    RecordKind,
    TxnId,
    TxnMarker,
    decode,
    encode,
)

u64 = st.integers(0, (1 << 64) - 1)
txns = st.builds(TxnId, u64, u64)
message_ids = st.builds(MessageId, u64, u64, st.integers(-1, (1 << 31) - 1))
acks = st.builds(PendingAck, txns, st.lists(message_ids, max_size=50).map(tuple), st.booleans())
markers = st.builds(
    TxnMarker, st.sampled_from([RecordKind.PREPARED, RecordKind.COMMITTED, RecordKind.ABORTED]), txns
)
records: st.SearchStrategy[Record] = st.one_of(acks, markers)


@given(records)
def test_round_trip(record: Record) -> None:
    assert decode(encode(record)) == record


@given(records)
def test_never_starts_with_batch_magic(record: Record) -> None:
    assert encode(record)[0] != 0x0E


@given(records, st.data())
def test_truncated_record_is_corrupt(record: Record, data: st.DataObject) -> None:
    raw = encode(record)
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(CorruptEntryError):
        decode(raw[:cut])


def test_unknown_kind_is_corrupt() -> None:
    with pytest.raises(CorruptEntryError):
        decode(bytes([0x0E, 0x01]) + bytes(20))


def test_layout_is_as_documented() -> None:
    raw = encode(PendingAck(TxnId(1, 2), (MessageId(3, 4, 5),), cumulative=True))
    assert raw == (
        bytes([1]) + (1).to_bytes(8, "big") + (2).to_bytes(8, "big") + bytes([1])
        + (1).to_bytes(4, "big") + (3).to_bytes(8, "big") + (4).to_bytes(8, "big") + (5).to_bytes(4, "big")
    )


@pytest.mark.parametrize("text", ["1:2", "1:2:3", "0:0:0"])
def test_message_id_text_round_trip(text: str) -> None:
    assert str(MessageId.parse(text)) == text


@pytest.mark.parametrize("text", ["", "1", "1:2:3:4", "a:b", "-1:2", "1:2:-3", f"{1 << 64}:1"])
def test_bad_message_ids(text: str) -> None:
    with pytest.raises(MalformedError):
        MessageId.parse(text)


@pytest.mark.parametrize("text", ["", "1", "1:", ":1", "x:1", f"1:{1 << 64}"])
def test_bad_txn_ids(text: str) -> None:
    with pytest.raises(MalformedError):
        TxnId.parse(text)
