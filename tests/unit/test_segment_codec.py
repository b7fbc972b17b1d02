"""The file backend's segment codec and scanner, without any file."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamtx.errors import CorruptEntryError
from streamtx.ledger import segment
from streamtx.ledger.segment import HEADER_SIZE, ScanStop

payloads_st = st.lists(st.binary(min_size=1, max_size=300), max_size=20)


def _starts(payloads: list[bytes]) -> list[int]:
    out, pos = [], 0
    for p in payloads:
        out.append(pos)
        pos += HEADER_SIZE + len(p)
    return out


@given(payloads_st, st.integers(min_value=0, max_value=2**40))
def test_scan_indexes_every_encoded_entry(payloads: list[bytes], base: int) -> None:
    buf = segment.encode_entries(payloads)
    res = segment.scan(buf, base)
    assert res.stop is ScanStop.END
    assert list(res.positions) == [base + p for p in _starts(payloads)]
    assert res.end == base + len(buf)
    assert segment.decode_run(buf, len(payloads)) == payloads


@given(payloads_st, st.data())
def test_a_cut_buffer_keeps_every_whole_entry(payloads: list[bytes], data: st.DataObject) -> None:
    buf = segment.encode_entries(payloads)
    cut = data.draw(st.integers(min_value=0, max_value=len(buf)))
    res = segment.scan(buf[:cut])
    complete = [
        p for p, pl in zip(_starts(payloads), payloads, strict=True)
        if p + HEADER_SIZE + len(pl) <= cut
    ]
    assert list(res.positions) == complete
    if res.stop is ScanStop.END:
        assert res.end == cut
    else:
        assert res.stop is ScanStop.SHORT
        assert res.end < cut
        assert res.end == _starts(payloads)[len(complete)]  # where the incomplete entry starts
        assert res.end + res.need > cut  # and it does not fit


@given(payloads_st.filter(bool), st.data())
def test_a_flipped_byte_stops_the_scan_at_its_entry(
    payloads: list[bytes], data: st.DataObject
) -> None:
    buf = bytearray(segment.encode_entries(payloads))
    at = data.draw(st.integers(min_value=0, max_value=len(buf) - 1))
    buf[at] ^= data.draw(st.integers(min_value=1, max_value=255))
    res = segment.scan(bytes(buf))
    starts = _starts(payloads)
    hit = max(i for i, p in enumerate(starts) if p <= at)
    # Every entry before the damaged one survives; the damaged one never does.
    assert list(res.positions) == starts[:hit]
    assert res.end == starts[hit]
    assert res.stop in (ScanStop.CORRUPT, ScanStop.SHORT)


def test_zeros_are_not_entries() -> None:
    res = segment.scan(bytes(4096))
    assert (list(res.positions), res.end, res.stop) == ([], 0, ScanStop.CORRUPT)


def test_an_impossible_length_is_corrupt_not_short() -> None:
    good = segment.encode_entries([b"abc"])
    bad = (segment.max_entry_bytes + 1).to_bytes(4, "big") + bytes(4)
    res = segment.scan(good + bad)
    assert (list(res.positions), res.end, res.stop) == ([0], len(good), ScanStop.CORRUPT)


def test_the_entry_layout_is_length_crc_payload() -> None:
    buf = segment.encode_entries([b"hello"])
    assert buf[:4] == (5).to_bytes(4, "big")
    assert buf[4:8] == segment.crc32c(b"hello").to_bytes(4, "big")
    assert buf[8:] == b"hello"


def test_empty_payloads_are_refused() -> None:
    with pytest.raises(ValueError):
        segment.encode_entries([b"a", b""])


def test_decode_run_checks_every_entry() -> None:
    buf = bytearray(segment.encode_entries([b"one", b"two"]))
    buf[-1] ^= 1
    with pytest.raises(CorruptEntryError):
        segment.decode_run(bytes(buf), 2)
    assert segment.decode_run(bytes(buf), 1) == [b"one"]
    with pytest.raises(CorruptEntryError):
        segment.decode_run(bytes(buf[:5]), 1)


@given(st.integers(min_value=0, max_value=10**20 - 1))
def test_segment_names_sort_like_offsets(base: int) -> None:
    name = segment.segment_name(base)
    assert len(name) == 24
    assert segment.parse_segment_name(name) == base


@pytest.mark.parametrize("name", ["LOCK", "TRIM", "TRIM.tmp", "1.seg", "0000000000000000000x.seg"])
def test_other_files_are_not_segments(name: str) -> None:
    assert segment.parse_segment_name(name) is None


@given(st.text(max_size=80))
def test_ledger_dir_names_are_safe_and_reversible(name: str) -> None:
    d = segment.ledger_dir_name(name)
    assert d and "/" not in d and "\x00" not in d and not d.startswith(".")
    assert len(d.encode()) <= 200
    hashed = len(name.encode()) * 3 > 200  # only names that escape to > 200 bytes are hashed
    assert segment.ledger_name_of(d) == (None if hashed and "~" in d else name)


def test_ledger_dir_name_examples() -> None:
    assert segment.ledger_dir_name("conf/append") == "conf%2Fappend"
    assert segment.ledger_dir_name("..") == "%2E%2E"
    assert segment.ledger_dir_name("") == "%"


@given(st.text(min_size=60, max_size=400))
def test_long_ledger_names_get_a_hash(name: str) -> None:
    d = segment.ledger_dir_name(name)
    assert len(d.encode()) <= 200
    assert segment.ledger_name_of(d) == (None if "~" in d else name)
    assert segment.ledger_dir_name(name + "x") != d


@given(st.integers(min_value=0, max_value=2**64 - 1), st.binary(max_size=64))
def test_trim_state_round_trip(start: int, state: bytes) -> None:
    raw = segment.encode_trim_state(start, state)
    assert segment.decode_trim_state(raw) == (start, state)
    with pytest.raises(CorruptEntryError):
        segment.decode_trim_state(raw[:-1])
    damaged = bytearray(raw)
    damaged[3] ^= 0x10
    with pytest.raises(CorruptEntryError):
        segment.decode_trim_state(bytes(damaged))


@given(st.lists(st.binary(min_size=1, max_size=300), min_size=1, max_size=5), st.data())
def test_find_entry_tells_a_torn_tail_from_entries_after_it(payloads: list[bytes], data: st.DataObject
                                                            ) -> None:
    """Any prefix of one entry is a torn tail (nothing found); garbage before whole entries is not."""
    entries = segment.encode_entries(payloads)
    first_len = HEADER_SIZE + len(payloads[0])
    cut = data.draw(st.integers(min_value=1, max_value=first_len - 1))
    assert segment.find_entry(entries[:cut], 1) == segment.Resync(None, True)
    garbage = data.draw(st.binary(min_size=1, max_size=64))
    found = segment.find_entry(garbage + entries, 1)
    assert found.complete and found.found is not None and found.found <= len(garbage)


def test_find_entry_skips_zeros_and_gives_up_past_its_budget() -> None:
    entry = segment.encode_entries([b"x" * 100])
    assert segment.find_entry(bytes(1 << 20) + entry, 1) == segment.Resync(1 << 20, True)
    big = segment.encode_entries([b"y" * 5000])
    assert segment.find_entry(b"\xff" + big, 1, crc_budget=100) == segment.Resync(None, False)
    assert segment.find_entry(b"\xff" + big, 1, plausible=lambda b, p, n: False) == segment.Resync(None, True)
