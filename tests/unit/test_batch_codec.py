"""The PIP-160 batched-entry codec: round trips, unbatched passthrough, corruption."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamtx.batching.codec import (
    HEADER_SIZE,
    MAGIC,
    VERSION,
    batched_size,
    decode_entry,
    encode_batch,
    is_batched,
)
from streamtx.errors import CorruptEntryError

records = st.lists(st.binary(max_size=300), max_size=40)
unbatched = st.binary(max_size=300).filter(lambda b: not b.startswith(MAGIC))


@given(records)
def test_round_trip(recs: list[bytes]) -> None:
    entry = encode_batch(recs)
    assert is_batched(entry)
    assert len(entry) == batched_size(recs)
    assert decode_entry(entry) == recs


@given(records)
def test_records_that_start_with_the_magic_round_trip_inside_a_batch(recs: list[bytes]) -> None:
    recs = [MAGIC + r for r in recs]
    assert decode_entry(encode_batch(recs)) == recs


@given(unbatched)
def test_an_unbatched_entry_is_one_record(data: bytes) -> None:
    assert not is_batched(data)
    assert decode_entry(data) == [data]


def test_layout_is_magic_version_then_length_prefixed_records() -> None:
    entry = encode_batch([b"ab", b"", b"xyz"])
    assert entry[:2] == b"\x0e\x01"
    assert struct.unpack(">H", entry[2:4]) == (VERSION,)
    assert entry[4:] == b"\x00\x00\x00\x02ab" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x03xyz"
    assert encode_batch([]) == MAGIC + b"\x00\x01"
    assert decode_entry(encode_batch([])) == []


def test_edge_unbatched_entries() -> None:
    assert decode_entry(b"") == [b""]
    assert decode_entry(b"\x0e") == [b"\x0e"]  # one magic byte is not the magic
    assert decode_entry(b"\x01\x0e\x01") == [b"\x01\x0e\x01"]
    assert decode_entry(bytearray(b"abc")) == [b"abc"]  # type: ignore[arg-type]


@given(st.lists(st.binary(min_size=1, max_size=50), min_size=1, max_size=10), st.data())
def test_every_truncation_of_a_batch_is_an_error(recs: list[bytes], data: st.DataObject) -> None:
    entry = encode_batch(recs)
    cut = data.draw(st.integers(min_value=2, max_value=len(entry) - 1))
    truncated = entry[:cut]
    # Cutting exactly after a record leaves a shorter, valid batch; anything else is corrupt.
    boundaries = {HEADER_SIZE + sum(4 + len(r) for r in recs[:i]) for i in range(len(recs))}
    if cut in boundaries:
        assert decode_entry(truncated) == recs[: sorted(boundaries).index(cut)]
    else:
        with pytest.raises(CorruptEntryError, match="batched entry"):
            decode_entry(truncated)


def test_truncated_header_and_lengths() -> None:
    with pytest.raises(CorruptEntryError, match="shorter than its header"):
        decode_entry(MAGIC)
    with pytest.raises(CorruptEntryError, match="shorter than its header"):
        decode_entry(MAGIC + b"\x00")
    with pytest.raises(CorruptEntryError, match="record 0 length"):
        decode_entry(MAGIC + b"\x00\x01\x00\x00")
    with pytest.raises(CorruptEntryError, match="record 1 needs 9 bytes"):
        decode_entry(encode_batch([b"ok"]) + b"\x00\x00\x00\x09short")


def test_unknown_version_is_an_error() -> None:
    with pytest.raises(CorruptEntryError, match="version 2"):
        decode_entry(MAGIC + b"\x00\x02")
