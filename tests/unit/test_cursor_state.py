"""CursorState and RangeSet against simple models, and the snapshot codec."""

from __future__ import annotations

import random
import struct
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from streamtx.cursor import ranges
from streamtx.cursor.ranges import RangeSet
from streamtx.cursor.state import MAGIC, VERSION, CursorState
from streamtx.errors import CorruptEntryError, MalformedError

universe = 60  # entry ids 0..59 are in play; some of them are gaps


def batch_size_of(entry_id: int) -> int:
    return 1 + entry_id % 7  # 1..7 records; size 1 deletes at its first index


class CursorStateMachine(RuleBasedStateMachine):
    """Random deletes, batch-index deletes and mark-deletes over a ledger with gaps.

    The model is the obvious one: a set of deleted ids, a dict of bitsets and a
    mark that steps one successor at a time.
    """

    def __init__(self) -> None:
        super().__init__()
        self.gaps: set[int] = set()
        self.live: list[int] = []
        self.mark = -1
        self.deleted: set[int] = set()
        self.bits: dict[int, int] = {}
        self.state = CursorState(self.succ)

    def succ(self, entry_id: int) -> int:
        nxt = entry_id + 1
        while nxt in self.gaps:
            nxt += 1
        return nxt

    @initialize(gaps=st.sets(st.integers(0, universe - 1), max_size=universe // 4))
    def make_gaps(self, gaps: set[int]) -> None:
        self.gaps = gaps
        self.live = [i for i in range(universe) if i not in gaps]

    def model_deleted(self, entry_id: int) -> bool:
        return entry_id <= self.mark or entry_id in self.deleted

    def settle(self) -> None:
        while self.succ(self.mark) in self.deleted:
            self.mark = self.succ(self.mark)
        self.deleted = {i for i in self.deleted if i > self.mark}
        self.bits = {i: b for i, b in self.bits.items() if i > self.mark}

    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        entry_id = data.draw(st.sampled_from(self.live))
        changed = self.state.delete(entry_id)
        assert changed == (not self.model_deleted(entry_id))
        if entry_id > self.mark:
            self.deleted.add(entry_id)
            self.bits.pop(entry_id, None)
        self.settle()

    @rule(data=st.data())
    def delete_batch_index(self, data: st.DataObject) -> None:
        entry_id = data.draw(st.sampled_from(self.live))
        size = batch_size_of(entry_id)
        index = data.draw(st.integers(0, size - 1))
        whole = self.state.delete_batch_index(entry_id, index, size)
        if not self.model_deleted(entry_id):
            bits = self.bits.get(entry_id, 0) | 1 << index
            if bits == (1 << size) - 1:
                self.deleted.add(entry_id)
                self.bits.pop(entry_id, None)
            else:
                self.bits[entry_id] = bits
        self.settle()
        assert whole == self.model_deleted(entry_id)

    @precondition(lambda self: bool(self.bits))
    @rule(data=st.data())
    def batch_size_mismatch_is_refused(self, data: st.DataObject) -> None:
        entry_id = data.draw(st.sampled_from(sorted(self.bits)))
        with pytest.raises(MalformedError):
            self.state.delete_batch_index(entry_id, 0, batch_size_of(entry_id) + 1)

    @rule(entry_id=st.integers(-1, universe + 2))
    def mark_delete(self, entry_id: int) -> None:
        moved = self.state.mark_delete(entry_id)
        assert moved == (entry_id > self.mark)
        self.mark = max(self.mark, entry_id)
        self.settle()

    @rule(data=st.data())
    def apply_mixed_batch(self, data: st.DataObject) -> None:
        """``apply`` does what its parts do one by one: mark, then entries, then records."""
        entries = data.draw(st.lists(st.sampled_from(self.live), max_size=8))
        records = []
        for entry_id in data.draw(st.lists(st.sampled_from(self.live), max_size=8)):
            size = batch_size_of(entry_id)
            records.append((entry_id, data.draw(st.integers(0, size - 1)), size))
        prefixes = []
        for entry_id in data.draw(st.lists(st.sampled_from(self.live), max_size=3)):
            size = batch_size_of(entry_id)
            prefixes.append((entry_id, data.draw(st.integers(0, size - 1)), size))
        mark = data.draw(st.none() | st.integers(-1, universe + 2))
        if mark is not None:
            self.mark = max(self.mark, mark)
            self.settle()
        for entry_id in entries:
            if entry_id > self.mark:
                self.deleted.add(entry_id)
                self.bits.pop(entry_id, None)
            self.settle()
        # A prefix is its records, one by one (after the single records, as apply takes them).
        one_by_one = [(e, i, n) for e, last, n in prefixes for i in range(last + 1)]
        for entry_id, index, size in records + one_by_one:
            if not self.model_deleted(entry_id):
                bits = self.bits.get(entry_id, 0) | 1 << index
                if bits == (1 << size) - 1:
                    self.deleted.add(entry_id)
                    self.bits.pop(entry_id, None)
                else:
                    self.bits[entry_id] = bits
            self.settle()
        version = self.state.version
        changed = self.state.apply(entries, records, mark, prefixes)
        assert changed == (self.state.version != version)

    @precondition(lambda self: bool(self.bits))
    @rule(data=st.data())
    def apply_refuses_a_bad_record_before_applying_anything(self, data: st.DataObject) -> None:
        entry_id = data.draw(st.sampled_from(sorted(self.bits)))
        others = [e for e in self.live if e != entry_id]
        version = self.state.version
        with pytest.raises(MalformedError):
            self.state.apply(others[:3], [(entry_id, 0, batch_size_of(entry_id) + 1)], self.mark)
        assert self.state.version == version

    @invariant()
    def agrees_with_model(self) -> None:
        state = self.state
        assert state.mark_delete_id == self.mark
        for entry_id in self.live:
            assert state.is_deleted(entry_id) == self.model_deleted(entry_id), entry_id
            size = batch_size_of(entry_id)
            for index in range(size):
                want = self.model_deleted(entry_id) or bool(self.bits.get(entry_id, 0) >> index & 1)
                assert state.is_deleted(entry_id, index) == want, (entry_id, index)
            assert state.deleted_batch_indexes(entry_id) == self.bits.get(entry_id)
        assert list(state.ranges()) == runs(self.deleted)
        assert state.range_count == len(runs(self.deleted))
        assert [(e, b) for e, _, b in state.partial_batches()] == sorted(self.bits.items())

    @invariant()
    def first_undeleted_agrees(self) -> None:
        for start in (-1, 0, self.mark, self.mark + 1, universe // 2, universe):
            want = self.succ(max(start, self.mark + 1) - 1)
            while want in self.deleted:
                want = self.succ(want)
            assert self.state.first_undeleted(start) == want

    @invariant()
    def codec_round_trips(self) -> None:
        data = self.state.encode()
        again = CursorState.decode(data, self.succ)
        assert again == self.state
        assert again.encode() == data


TestCursorStateMachine = CursorStateMachine.TestCase
TestCursorStateMachine.settings = settings(max_examples=200, stateful_step_count=60, deadline=None)


def runs(ids: set[int]) -> list[tuple[int, int]]:
    """Consecutive runs of ints as inclusive ranges."""
    out: list[tuple[int, int]] = []
    for i in sorted(ids):
        if out and out[-1][1] + 1 == i:
            out[-1] = (out[-1][0], i)
        else:
            out.append((i, i))
    return out


# --- RangeSet ---------------------------------------------------------------

range_ops = st.lists(st.tuples(st.booleans(), st.integers(0, 300), st.integers(0, 12)), max_size=200)


@given(range_ops)
def test_range_set_matches_a_set_of_ints(ops: list[tuple[bool, int, int]]) -> None:
    # Tiny chunks, so splitting, merging across chunks and dropping whole chunks all happen.
    with mock.patch.object(ranges, "_chunk_max", 4):
        rs = RangeSet()
        model: set[int] = set()
        for is_add, lo, span in ops:
            if is_add:
                new = set(range(lo, lo + span + 1))
                assert rs.add(lo, lo + span) == bool(new - model)
                model |= new
            else:
                rs.drop_through(lo)
                model = {i for i in model if i > lo}
            assert list(rs) == runs(model)
            assert len(rs) == len(runs(model))
            assert rs.first() == (runs(model)[0] if model else None)
            for probe in range(0, 320, 7):
                found = rs.find(probe)
                assert (found is not None) == (probe in model)
                assert (probe in rs) == (probe in model)
        rebuilt = RangeSet.from_sorted(list(rs))
        assert list(rebuilt) == list(rs)
        assert all(rebuilt.find(p) == rs.find(p) for p in range(0, 320, 3))


def test_range_set_rejects_an_empty_range() -> None:
    with pytest.raises(ValueError):
        RangeSet().add(5, 4)


# --- delete_range against a flat model --------------------------------------


@given(st.lists(st.tuples(st.integers(0, 80), st.integers(0, 10)), max_size=40))
def test_delete_range_is_many_deletes(spans: list[tuple[int, int]]) -> None:
    one_by_one, ranged = CursorState(), CursorState()
    for lo, span in spans:
        for i in range(lo, lo + span + 1):
            one_by_one.delete(i)
        ranged.delete_range(lo, lo + span)
    assert ranged == one_by_one


# --- the codec ----------------------------------------------------------------

state_ops = st.lists(
    st.one_of(
        st.tuples(st.just("delete"), st.integers(0, 10_000), st.just(0)),
        st.tuples(st.just("batch"), st.integers(0, 10_000), st.integers(0, 699)),
        st.tuples(st.just("mark"), st.integers(-1, 3_000), st.just(0)),
    ),
    max_size=300,
)


def build(ops: list[tuple[str, int, int]]) -> CursorState:
    state = CursorState()
    for op, entry_id, extra in ops:
        if op == "delete":
            state.delete(entry_id)
        elif op == "batch":
            size = 1 + entry_id % 700  # bitsets wider than a machine word, too
            state.delete_batch_index(entry_id, extra % size, size)
        else:
            state.mark_delete(entry_id)
    return state


@given(state_ops)
def test_codec_round_trip(ops: list[tuple[str, int, int]]) -> None:
    state = build(ops)
    data = state.encode()
    again = CursorState.decode(data)
    assert again == state
    assert again.encode() == data
    assert again.version == 0


@given(state_ops, st.data())
def test_every_truncation_or_extension_is_corrupt(
    ops: list[tuple[str, int, int]], data: st.DataObject
) -> None:
    encoded = build(ops).encode()
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(CorruptEntryError):
        CursorState.decode(encoded[:cut])
    with pytest.raises(CorruptEntryError):
        CursorState.decode(encoded + data.draw(st.binary(min_size=1, max_size=4)))


@given(st.integers(-1, 2**40), st.binary(max_size=40))
def test_arbitrary_bodies_decode_or_fail_cleanly(mark: int, body: bytes) -> None:
    data = struct.pack(">2sBq", MAGIC, VERSION, mark) + body
    try:
        state = CursorState.decode(data)
    except CorruptEntryError:
        return
    assert CursorState.decode(state.encode()) == state


def test_malformed_snapshots_are_refused() -> None:
    header = struct.pack(">2sBq", MAGIC, VERSION, 5)
    bad = {
        "magic": struct.pack(">2sBq", b"XX", VERSION, 5) + b"\x00\x00",
        "version": struct.pack(">2sBq", MAGIC, 9, 5) + b"\x00\x00",
        "mark below -1": struct.pack(">2sBq", MAGIC, VERSION, -2) + b"\x00\x00",
        "first range at the mark": header + b"\x01\x00" + b"\x00\x00",
        "touching ranges": header + b"\x02\x00" + b"\x02\x00" + b"\x01\x00",
        "overlong varint": header + b"\x80\x00\x00",
        "empty bitset": header + b"\x00\x01" + b"\x02\x03\x00",
        "full bitset": header + b"\x00\x01" + b"\x02\x03\x07",
        "bits past the size": header + b"\x00\x01" + b"\x02\x03\x09",
        "batch inside a range": header + b"\x01\x01" + b"\x02\x00" + b"\x02\x03\x01",
        "batch of size 0": header + b"\x00\x01" + b"\x02\x00",
    }
    for why, data in bad.items():
        with pytest.raises(CorruptEntryError):
            CursorState.decode(data)
            pytest.fail(why)


# --- behaviour worth spelling out ------------------------------------------------


def test_mark_delete_hops_over_gaps_and_forgets_what_it_passes() -> None:
    gaps = {0, 4, 5, 9}

    def succ(entry_id: int) -> int:
        nxt = entry_id + 1
        while nxt in gaps:
            nxt += 1
        return nxt

    state = CursorState(succ)
    for entry_id in (8, 6, 3, 2):
        state.delete(entry_id)
    assert state.delete_batch_index(10, 1, 3) is False
    assert state.mark_delete_id == -1 and state.range_count == 3
    state.delete(1)  # 1..3, gap 4-5, 6, then 7 is missing
    assert state.mark_delete_id == 6
    state.delete(7)  # 6..8, gap 9, then 10 is still partial
    assert state.mark_delete_id == 8
    assert state.first_undeleted() == 10
    assert state.delete_batch_index(10, 0, 3) is False
    assert state.delete_batch_index(10, 2, 3) is True
    assert state.mark_delete_id == 10
    assert state.range_count == 0 and state.partial_batch_count == 0
    assert state.first_undeleted(0) == 11


def test_batch_index_arguments_are_checked() -> None:
    state = CursorState()
    for index, size in ((3, 3), (-1, 3), (0, 0)):
        with pytest.raises(MalformedError):
            state.delete_batch_index(1, index, size)
    assert state.delete_batch_index(1, 0, 1) is True  # a batch of one is one record
    assert state.mark_delete_id == -1 and state.is_deleted(1)


def test_deleting_a_partial_entry_drops_its_bitset() -> None:
    state = CursorState()
    state.delete_batch_index(5, 0, 4)
    assert state.deleted_batch_indexes(5) == 0b1
    assert state.delete(5) is True
    assert state.deleted_batch_indexes(5) is None
    assert state.is_deleted(5, 3)
    assert state.delete_batch_index(5, 2, 4) is True  # already wholly deleted


def test_version_counts_changes_only() -> None:
    state = CursorState()
    state.delete(3)
    state.delete(3)
    state.mark_delete(1)
    state.mark_delete(0)
    state.delete_batch_index(9, 1, 2)
    state.delete_batch_index(9, 1, 2)
    assert state.version == 3


def test_a_hundred_thousand_ranges_in_random_order() -> None:
    ids = list(range(2, 200_002, 2))
    random.Random(7).shuffle(ids)
    state = CursorState()
    for entry_id in ids:
        state.delete(entry_id)
    assert state.range_count == 100_000
    data = state.encode()
    assert len(data) < 300_000  # deltas, not 16 bytes a range
    again = CursorState.decode(data)
    assert again == state
    state.delete(0)
    for entry_id in ids:
        state.delete(entry_id - 1)  # fill every hole: the mark runs to the end
    assert state.mark_delete_id == 200_000
    assert state.range_count == 0
