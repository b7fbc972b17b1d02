"""Edges of the segment codec that mutation testing (``make mutate``) found unpinned."""

from __future__ import annotations

import re

import pytest

from streamtx.errors import CorruptEntryError
from streamtx.ledger import segment
from streamtx.ledger.segment import HEADER_SIZE, ScanStop


def test_directory_names_at_and_past_the_limit() -> None:
    exact = "a" * 200
    assert segment.ledger_dir_name(exact) == exact  # 200 bytes still fit
    assert segment.ledger_name_of(exact) == exact
    longer = segment.ledger_dir_name("a" * 201)
    assert re.fullmatch(r"a{183}~[0-9a-f]{16}", longer)
    assert segment.ledger_name_of(longer) is None


@pytest.mark.parametrize("shift", range(3))
def test_a_cut_never_splits_an_escape(shift: int) -> None:
    # "/" escapes to "%2F": place one across the 183-byte cut at each offset.
    name = "a" * (181 + shift) + "/" * 40
    out = segment.ledger_dir_name(name)
    head, digest = out.split("~")
    assert len(digest) == 16 and len(head) <= 183
    assert re.fullmatch(r"a*(%2F)*", head), head  # whole escapes only
    assert head == ("a" * (181 + shift) + "%2F" * 40)[: len(head)]
    assert len(head) > 183 - 3  # cut back by at most the escape it would split


def test_scan_takes_an_entry_of_the_largest_length_and_reports_its_stops() -> None:
    one = segment.encode_entries([b"x"])
    res = segment.scan(one + one[:5], base=100)
    assert (list(res.positions), res.end) == ([100], 100 + len(one))
    assert (res.stop, res.need) == (ScanStop.SHORT, HEADER_SIZE)
    biggest = segment.max_entry_bytes.to_bytes(4, "big") + bytes(4)
    res = segment.scan(biggest)  # a possible length, its payload not there yet: short, not corrupt
    assert (res.stop, res.need, res.end) == (ScanStop.SHORT, HEADER_SIZE + segment.max_entry_bytes, 0)
    res = segment.scan((segment.max_entry_bytes + 1).to_bytes(4, "big") + bytes(4))
    assert res.stop is ScanStop.CORRUPT


def test_decode_run_checks_every_entry() -> None:
    two = segment.encode_entries([b"ab", b"cd"])
    assert segment.decode_run(two, 2) == [b"ab", b"cd"]
    assert segment.decode_run(two + bytes(HEADER_SIZE - 1), 2) == [b"ab", b"cd"]
    with pytest.raises(CorruptEntryError):
        segment.decode_run(two[:-1], 2)  # the second payload cut
    with pytest.raises(CorruptEntryError):
        segment.decode_run(two[: len(two) // 2 + HEADER_SIZE - 1], 2)  # the second header cut
    with pytest.raises(CorruptEntryError):
        segment.decode_run(bytes(HEADER_SIZE) + two, 1)  # a zero length is never an entry
